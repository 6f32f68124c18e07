"""GGUF files decoderkit did not write: tiny random transformers directories (each family's
tokenizer, test_pretokenizer's) converted by llama.cpp's own converter and quantized by
llama.cpp itself (``llama_model_quantize``: Q8_0, Q4_0, Q4_K_M, Q6_K on a model whose widths
the K-quants' blocks of 256 divide), opened by the one opener: the float32 converted file
exactly as the directory it came from; every file's logits within 1e-4 of transformers'
``from_pretrained(dir, gguf_file=...)`` on the same file (and its dequantization mattering:
Q4_0's moved past the bound from float32's); the token ids llama.cpp's ``tokenize`` gives, per
pre-tokenizer; greedy continuations llama.cpp's own under the margin rule at each type; the
chat template the directory's."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import assert_tokens_agree_where_decided
from interop import gguf_convert as c
from interop import gguf_helpers as h

from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.llama.hf import load_llama
from decoderkit.text.lm.chat import ChatTemplate

tp = pytest.importorskip("interop.gguf.test_pretokenizer", reason="its families' tokenizers")
# llama.cpp's log-probabilities against ours: at float32 test_llama.py's bound; at a quantized
# type it quantizes the activations too (to 8 bits, Q8_0 / Q8_K, before each product with
# quantized weights), measured 0.05-0.077 on "wide" (ours are float32 against the same
# dequantized weights: transformers' within 1e-4)
BOUNDS = {"F32": 2e-4, "Q8_0": 0.1, "Q4_0": 0.1, "Q4_K_M": 0.12, "Q6_K": 0.1}
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TEXTS = [*tp.TEXTS, "数字和汉字混在一起 123", "emoji 🦊🐶🚀 and ✅ done", "a  b   c    d\n\n\n",
         "Ünïcödé àccents: ñ ç ø å ß"]
PROMPTS = [[(7 * i + 13 * j + 5) % tp.SIZE for j in range(1 + i % 5)] for i in range(32)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """name -> (its Hugging Face directory, llama.cpp's GGUF files by type): each family's
    directory converted to f32 by llama.cpp's converter (one run for all), and "wide" (a Llama
    of width 256 and feed-forward 512) also quantized to each type."""
    from interop.llama_helpers import hf_model

    source = c.source()
    root = tmp_path_factory.mktemp("foreign")
    dirs = {name: tp.directory(name, root / name) for name in tp.FAMILIES}
    wide = tp.directory("smollm", root / "wide")  # its tokenizer, a K-quantable model
    model = hf_model("llama-gqa", seed=2, vocab_size=tp.ROWS, hidden_size=256,
                     intermediate_size=512, max_position_embeddings=h.CONTEXT)
    with torch.no_grad():  # 2x the initialisation, not 8x: llama.cpp's 8-bit activations'
        for p in model.parameters():  # error grows with them
            p.div_(4) if p.dim() > 1 else None
    model.save_pretrained(wide)
    dirs["wide"] = wide
    config = json.loads((dirs["qwen2"] / "tokenizer_config.json").read_text())
    (dirs["qwen2"] / "tokenizer_config.json").write_text(json.dumps(config | {
        "chat_template": CHATML}))
    pre = {name: name for name in tp.FAMILIES} | {"wide": "smollm"}
    c.convert_all([(d, root / f"{n}.gguf", pre[n]) for n, d in dirs.items()], source)
    out = {n: (d, {"F32": root / f"{n}.gguf"}) for n, d in dirs.items()}
    for kind in c.FTYPES:
        out["wide"][1][kind] = c.quantize(root / "wide.gguf", root / f"wide-{kind}.gguf", kind)
    return out


def logits(lm, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return lm(torch.tensor([ids]))[0]


def test_a_converted_float32_file_opens_as_its_directory(files):
    for name, (directory, by_type) in files.items():
        ours, theirs = load_checkpoint(by_type["F32"]), load_llama(directory)[0]
        assert ours.config == theirs.config, name
        for ids in PROMPTS:
            assert torch.equal(logits(ours.model, ids), logits(theirs, ids)), name


@pytest.mark.parametrize("kind", ["F32", *c.FTYPES])
def test_logits_are_transformers_gguf_file_models(files, kind):
    transformers = pytest.importorskip("transformers")
    file = files["wide"][1][kind]
    ours = load_checkpoint(file).model
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        file.parent, gguf_file=file.name).eval()
    f32 = load_checkpoint(files["wide"][1]["F32"]).model
    moved = 0.0
    for ids in PROMPTS:
        with torch.no_grad():
            want = theirs(torch.tensor([ids])).logits[0]
        assert torch.allclose(logits(ours, ids), want, atol=1e-4, rtol=0), kind
        moved = max(moved, float((logits(f32, ids) - want).abs().max()))
    assert kind == "F32" or moved > 1e-3, (kind, moved)  # the dequantized values matter


def test_token_ids_are_llama_cpps_for_each_pre_tokenizer(files):
    for name in tp.FAMILIES:
        tokenizer = load_checkpoint(files[name][1]["F32"]).tokenizer
        llm = h.llama_cpp_model(files[name][1]["F32"], h.CONTEXT)
        for text in TEXTS:
            assert tokenizer.encode(text) == llm.tokenize(text.encode(), add_bos=False,
                                                          special=False), (name, text)
            assert tokenizer.encode_prompt(text) == llm.tokenize(text.encode(), add_bos=True,
                                                                 special=False), (name, text)
        assert tokenizer.encode("<|endoftext|>") == llm.tokenize(
            b"<|endoftext|>", add_bos=False, special=True), name


@pytest.mark.parametrize("kind", ["F32", *c.FTYPES])
def test_greedy_continuations_are_llama_cpps(files, kind):
    file = files["wide"][1][kind]
    lm = load_checkpoint(file).model
    llm = h.llama_cpp_model(file, h.CONTEXT)
    want, margins = h.greedy_with_margins(lm, PROMPTS, 3)
    got = [h.llama_cpp_greedy(llm, p, 3) for p in PROMPTS]
    assert_tokens_agree_where_decided(want, got, margins, BOUNDS[kind], at_least=1)
    llm.reset()
    llm.eval(PROMPTS[-1] * 4)
    theirs = torch.tensor(llm.scores[:llm.n_tokens]).log_softmax(-1)
    assert (logits(lm, PROMPTS[-1] * 4).log_softmax(-1) - theirs).abs().max() < BOUNDS[kind]


def test_the_chat_template_is_the_directorys(files):
    directory, by_type = files["qwen2"]
    ckpt = load_checkpoint(by_type["F32"])
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    theirs = ChatTemplate.find(directory)
    ours = ckpt.chat
    assert ours.source == CHATML and ours.render(messages) == theirs.render(messages)
    assert ours.encode(ckpt.tokenizer, messages) == theirs.encode(load_llama(directory)[1],
                                                                  messages)
    assert ckpt.tokenizer.special_id("eos") in ckpt.end_ids
