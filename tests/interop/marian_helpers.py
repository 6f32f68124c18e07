"""Shared by the Marian tests: local Marian directories with random weights and sentencepiece
models trained here on generated text (nothing downloaded), and varied sentences."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")

WORDS = ("the a house cat dog runs quickly over bridge river 12 345 2026 café naïve über "
         "Straße déjà vu garçon été hello world tree green blue red small large . , ! ? ; : "
         "( ) ' \" - Ärger Öl ñandú señor").split()


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` varied sentences: words, digits, accents, punctuation, emoji, odd spacing,
    language codes, special-token strings, empty lines."""
    rng = random.Random(seed)
    extras = ["😀", "👍🏽", "∑", "中文", "\t", "  ", "3.14", "1,000", "e-mail", "<unk>", "</s>",
              "<pad>", "»", "…", "№", "Ω"]
    out = []
    for i in range(n):
        if i % 97 == 0:
            out.append("")
            continue
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 14))]
        for _ in range(rng.randint(0, 2)):
            words.insert(rng.randint(0, len(words)), rng.choice(extras))
        text = rng.choice([" ", " ", "  "]).join(words)
        if i % 13 == 0:
            text = ">>fra<< " + text
        if i % 17 == 0:
            text = text.upper()
        out.append(text)
    return out


def sources(n: int, seed: int = 0) -> list[str]:
    """``n`` non-empty sentences for the model, none with a literal "<pad>": MarianTokenizer
    reads it as the pad id, which decoderkit masks in a source like padding (it masks by id)
    while HF's attention_mask shows it."""
    out, extra = [], 0
    while len(out) < n:
        out = [s for s in sentences(n + extra, seed) if s and "<pad>" not in s][:n]
        extra += 10
    return out


def train_spm(texts: list[str], vocab_size: int, seed: int) -> bytes:
    """A unigram sentencepiece model (as opus-mt's) trained on ``texts``; its bytes."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=model,
                                   vocab_size=vocab_size, model_type="unigram",
                                   character_coverage=0.98, seed_sentencepiece_size=2000,
                                   minloglevel=2, num_threads=1,
                                   hard_vocab_limit=False)
    return model.getvalue()


def vocab_of(*models: bytes, pad_last: bool = True) -> dict[str, int]:
    """Marian's vocab.json layout: </s> 0, <unk> 1, the pieces, <pad> last (or at 2)."""
    pieces = []
    for m in models:
        proc = spm.SentencePieceProcessor(model_proto=m)
        pieces += [proc.id_to_piece(i) for i in range(proc.get_piece_size())
                   if not (proc.is_control(i) or proc.is_unknown(i))]
    pieces = list(dict.fromkeys(pieces))
    ordered = ["</s>", "<unk>", *pieces, "<pad>"] if pad_last else \
        ["</s>", "<unk>", "<pad>", *pieces]
    return {p: i for i, p in enumerate(ordered)}


def write_marian(directory: Path, *, activation: str = "swish", separate: bool = False,
                 tie_generator: bool = True, scale: bool = True, d_model: int = 16,
                 layers: int = 2, heads: int = 2, ffn: int = 32, max_positions: int = 128,
                 seed: int = 0, eos_bias: float = 3.0, weight_scale: float = 0.5) -> Path:
    """A random MarianMTModel with its tokenizer files in ``directory`` (save_pretrained).

    Norms, biases and ``final_logits_bias`` are moved away from their init; EOS gets
    ``eos_bias`` more so that outputs end at different lengths."""
    texts = sentences(300, seed=seed + 1)
    src_model = train_spm(texts, 150, seed)
    tgt_model = train_spm([t[::-1] for t in texts], 130, seed + 1) if separate else src_model
    # separate vocabularies: HF has one pad id for both sides, so <pad> is id 2 in each
    vocab = vocab_of(src_model, pad_last=not separate)
    tgt_vocab = vocab_of(tgt_model, pad_last=False) if separate else vocab
    pad = vocab["<pad>"]
    config = transformers.MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(tgt_vocab), d_model=d_model,
        encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
        decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
        max_position_embeddings=max_positions, activation_function=activation,
        pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
        forced_eos_token_id=0, scale_embedding=scale,
        share_encoder_decoder_embeddings=not separate, tie_word_embeddings=tie_generator,
        dropout=0.1)
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():  # outputs that vary by source, not loops
            if p.dim() == 1:
                p.add_(0.2 * torch.randn(p.shape))
            else:
                scale = 0.15 if "embed" in name or "shared" in name else weight_scale
                p.copy_(scale * torch.randn(p.shape))
        for emb in (model.model.encoder.embed_tokens, model.model.decoder.embed_tokens):
            emb.weight[pad] = 0.0  # as in every Marian model (HF's padding_idx row)
        bias = 0.5 * torch.randn(model.final_logits_bias.shape)
        bias[0, 0] += eos_bias
        model.final_logits_bias.copy_(bias)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    (directory / "source.spm").write_bytes(src_model)
    (directory / "target.spm").write_bytes(tgt_model)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    settings = {"separate_vocabs": separate, "source_lang": "en", "target_lang": "xx"}
    if separate:
        (directory / "target_vocab.json").write_text(json.dumps(tgt_vocab, ensure_ascii=False))
    (directory / "tokenizer_config.json").write_text(json.dumps(settings))
    return directory


def hf_model(directory: Path, dtype: torch.dtype = torch.float32):
    """The directory in ``MarianMTModel``, eval mode; in float64 its sinusoid table is set to
    the exact float64 values (HF computes it in float64 but stores float32 values)."""
    model = transformers.MarianMTModel.from_pretrained(directory).eval().to(dtype)
    if dtype == torch.float64:
        for side in (model.model.encoder, model.model.decoder):
            table = side.embed_positions.weight
            n, d = table.shape
            angle = np.arange(n)[:, None] / 10000 ** (np.arange(0, d, 2) / d)  # (n, d/2)
            exact = np.concatenate([np.sin(angle), np.cos(angle)], axis=1)
            with torch.no_grad():
                table.copy_(torch.from_numpy(exact))
    return model


def hf_tokenizer(directory: Path):
    """``transformers.MarianTokenizer`` of the directory."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        return transformers.MarianTokenizer.from_pretrained(directory)
