"""interop.lm.tune_run: a base without an end-of-text token (an ``lm train`` BPE run) tuned by
LoRA gains <|endoftext|> (the next id, the embedding grown by a row), trains its row as PEFT's
trainable tokens, and the run opens with the grown tokenizer: its samples end at the new token,
where the base's never end."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from decoderkit.cli import main
from decoderkit.generation.lm.complete import generate
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer
from decoderkit.training.lm.checkpoint import save_lm_checkpoint
from serve.lm.lm_serving import TEXT

WORDS = ["quick", "brown", "fox", "lazy", "dog", "stitch", "time", "gold", "question", "nine"]


def bpe_base(directory):
    """An lm train BPE run's shape: 300 BPE tokens, no special token at all."""
    tokenizer = LMTokenizer.train_bpe([TEXT], 300)
    torch.manual_seed(0)
    model = DecoderOnlyLM(LMConfig(vocab_size=tokenizer.vocab_size, n_layers=2, d_model=32,
                                   n_heads=4, d_ff=64, max_len=64, dropout=0.0))
    return save_lm_checkpoint(directory, model, tokenizer, step=1), tokenizer


def test_a_base_without_an_end_of_text_gains_one_and_the_tuned_samples_end_there(tmp_path):
    base, tokenizer = bpe_base(tmp_path / "base")
    assert not tokenizer.end_ids
    vocab = tokenizer.vocab_size
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"The {w} is", "completion": f" {w}."})
                            + "\n" for w in WORDS * 2))
    run = tmp_path / "run"
    assert main(["lm", "tune", "--checkpoint", str(base), "--data", str(data), "--out",
                 str(run), "--max-steps", "150", "--valid-every", "50", "--batch-size", "8",
                 "--lr", "1e-2", "--warmup", "5", "--rank", "8", "--targets", "all-linear",
                 "--quiet", "--threads", "1"]) == 0
    config = json.loads((run / "adapter_config.json").read_text())
    assert config["trainable_token_indices"] == {"wte": [vocab]}  # a tied head follows it
    tensors = load_file(run / "adapter_model.safetensors")
    assert tensors["base_model.model.transformer.wte.token_adapter.trainable_tokens_delta"
                   ].shape == (1, 32)
    assert LMTokenizer.load(run / "tokenizer.json").hf.token_to_id(END_OF_TEXT) == vocab
    tuned = load_checkpoint(run)  # its base through base_model_name_or_path, merged, grown
    assert tuned.model.config.vocab_size == vocab + 1 and tuned.tokenizer.eos_id == vocab
    plain = load_checkpoint(base)
    for w in WORDS[:4]:
        ids = tuned.tokenizer.encode(f"The {w} is")
        out = generate(tuned.model, [ids], max_new_tokens=20, greedy=True, eos_id=vocab)[0]
        assert out[-1] == vocab and len(out) < 20, tuned.tokenizer.decode(out)
        free = generate(plain.model, [ids], max_new_tokens=20, greedy=True)[0]
        assert len(free) == 20 and vocab not in free  # the base has no such token to end at
