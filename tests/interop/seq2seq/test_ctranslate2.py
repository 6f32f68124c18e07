"""CTranslate2 export: CTranslate2's own Translator on our weights gives our tokens wherever
float32 rounding (or int8's error) cannot decide otherwise."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import (
    FLOAT32_ENGINES,
    assert_tokens_agree_where_decided,
    beam_margins,
    translation_margins,
)
from interop.export_helpers import random_checkpoint, random_lines

from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.translate import DecodeOptions, translate_lines
from decoderkit.interop.artifacts import MANIFEST
from decoderkit.interop.seq2seq.ctranslate2 import Ctranslate2Engine, export_ctranslate2

pytest.importorskip("ctranslate2")

# @pytest.mark.engines: the tests that compare two engines or precisions, rerun under
# AVX2 by `make test` (the others check files, messages and refusals)

CONFIGS = [(False, False), (False, True), (True, False), (True, True)]  # norm_first, tied
# an EOS bias per config (seeded weights) with which some lines end by EOS and some by max_len
MIXED_EOS = {(False, False): 2.0, (False, True): 1.0, (True, False): 0.0, (True, True): 3.0}


@pytest.mark.engines
@pytest.mark.parametrize("norm_first,tied", CONFIGS)
def test_greedy_same_tokens_where_decided(tmp_path, norm_first, tied):
    ckpt = random_checkpoint(tmp_path / "ckpt", norm_first=norm_first, tied=tied,
                             eos_bias=MIXED_EOS[norm_first, tied])
    export_ctranslate2(ckpt, tmp_path / "ct2")
    engine = Ctranslate2Engine(tmp_path / "ct2", threads=1)
    lines = random_lines()
    ours = translate_lines(ckpt, lines, DecodeOptions(explain=2), batch_size=8)
    theirs = engine.translate_lines(lines, DecodeOptions(), batch_size=8)
    assert {r.stop_reason for r in ours} == {"eos", "max_len"}  # both ways of stopping seen
    assert_tokens_agree_where_decided([r.tokens for r in ours], [r.tokens for r in theirs],
                                      translation_margins(ours), FLOAT32_ENGINES,
                                      at_least=30)  # EOS included
    for a, b in zip(ours, theirs, strict=True):  # ours: sum; CTranslate2: sum / length
        if a.tokens != b.tokens:
            continue  # parted after a step the rounding may decide either way
        assert (a.text, a.stop_reason) == (b.text, b.stop_reason)
        n = len(ckpt.tgt_tokenizer.encode(a.text)) + (a.stop_reason == "eos")
        assert b.score * n == pytest.approx(a.score, rel=1e-4, abs=1e-3)


@pytest.mark.engines
@pytest.mark.parametrize("norm_first,tied", CONFIGS)
def test_beam4_same_tokens_where_decided_without_early_eos(tmp_path, norm_first, tied):
    """EOS unreachable: the beam conventions (a finished hypothesis keeps its slot in ours,
    CTranslate2 retires it and refills the beam) then coincide, and so must every token."""
    ckpt = random_checkpoint(tmp_path / "ckpt", norm_first=norm_first, tied=tied,
                             eos_bias=-1e4)
    export_ctranslate2(ckpt, tmp_path / "ct2")
    engine = Ctranslate2Engine(tmp_path / "ct2", threads=1)
    lines = random_lines(24, seed=1)
    ours = translate_lines(ckpt, lines, DecodeOptions(beam=4, n_best=2), batch_size=8)
    theirs = engine.translate_lines(lines, DecodeOptions(beam=4), batch_size=8)
    assert_tokens_agree_where_decided([[r.text] for r in ours], [[r.text] for r in theirs],
                                      beam_margins(ours), FLOAT32_ENGINES, at_least=18)
    for a, b in zip(ours, theirs, strict=True):
        if a.text == b.text:  # else a near-tie of the two best, either way
            assert b.score == pytest.approx(a.score, rel=1e-4)


# CTranslate2 int8 (weights and activations) against our float32, on these random 2+2-layer
# models: a log-prob moves by the rounding of every product before it (about 1% per product,
# on logits spread over several nats), so by at most INT8_FIRST_STEP at the first step and by
# INT8_MEAN on average over 8 steps (measured: 0.46 and 0.25). A broken export (a scale lost,
# weights swapped) is off by the logits' spread, as another seed's model is (mean 1.45, checked).
INT8_FIRST_STEP, INT8_MEAN = 0.6, 0.5


@pytest.mark.engines
def test_int8_export_loads_and_scores_and_translates_close_to_float32(tmp_path):
    ckpt = random_checkpoint(tmp_path / "ckpt", norm_first=False, tied=False, eos_bias=2.0)
    other = random_checkpoint(tmp_path / "other", norm_first=False, tied=False, eos_bias=2.0,
                              seed=1)
    export_ctranslate2(ckpt, tmp_path / "ct2", quantization="int8")
    assert json.loads((tmp_path / "ct2" / MANIFEST).read_text())["weights"] == "int8"
    lines = random_lines(120)
    engine = Ctranslate2Engine(tmp_path / "ct2", threads=1)
    src = [engine.src_tokenizer.tokens(engine.src_tokenizer.encode(line)) for line in lines]

    def errors(results):  # |CTranslate2 int8 log-prob - float32 log-prob| of each token
        scored = engine.translator.score_batch(src, [r.tokens for r in results])
        return [[abs(s["logprob"] - p)  # CTranslate2 also scores an EOS after them: not ours
                 for s, p in zip(r.steps, x.log_probs, strict=False)]
                for r, x in zip(results, scored, strict=True)]

    ours = translate_lines(ckpt, lines, DecodeOptions(max_len=8, explain=2))
    err = errors(ours)
    assert max(e[0] for e in err) <= INT8_FIRST_STEP
    assert np.mean([x for e in err for x in e]) <= INT8_MEAN
    wrong = errors(translate_lines(other, lines, DecodeOptions(max_len=8, explain=2)))
    assert np.mean([x for e in wrong for x in e]) > INT8_MEAN  # the bound can fail
    theirs = engine.translate_lines(lines, DecodeOptions(max_len=8))
    assert_tokens_agree_where_decided(  # first tokens, where int8 cannot flip them
        [r.tokens[:1] for r in ours], [r.tokens[:1] for r in theirs],
        translation_margins(ours), INT8_FIRST_STEP, at_least=15)


def test_workers_translate_batches_at_once_with_the_same_results(tmp_path):
    """workers=2: CTranslate2's inter_threads, every chunk submitted before any is read."""
    ckpt = random_checkpoint(tmp_path / "ckpt", norm_first=False, tied=False, eos_bias=2.0)
    export_ctranslate2(ckpt, tmp_path / "ct2", quantization="int8")
    lines, options = random_lines(12), DecodeOptions(beam=2, max_len=8)
    one = Ctranslate2Engine(tmp_path / "ct2", threads=2).translate_lines(lines, options, 4)
    engine = Ctranslate2Engine(tmp_path / "ct2", threads=2, workers=2)
    assert engine.translator.num_translators == 2
    two = engine.translate_lines(lines, options, 4)
    assert [(r.tokens, r.score) for r in two] == [(r.tokens, r.score) for r in one]


def test_existing_out_needs_overwrite_and_only_an_export_is_replaced(tmp_path):
    ckpt = random_checkpoint(tmp_path / "ckpt", norm_first=False, tied=False)
    out = tmp_path / "ct2"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="--overwrite"):
        export_ctranslate2(ckpt, out)
    with pytest.raises(UsageError, match="not a decoderkit export"):
        export_ctranslate2(ckpt, out, overwrite=True)  # a user's directory is never replaced
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    (out / "keep.txt").unlink()
    out.rmdir()
    export_ctranslate2(ckpt, out)
    (out / "notes.md").write_text("mine")  # a user's file inside an export: kept, refused
    with pytest.raises(UsageError, match="notes.md"):
        export_ctranslate2(ckpt, out, overwrite=True)
    assert (out / "notes.md").read_text() == "mine"
    (out / "notes.md").unlink()
    before = (out / "model.bin").stat().st_ino
    export_ctranslate2(ckpt, out, overwrite=True)  # an export alone: replaced whole
    assert (out / "model.bin").stat().st_ino != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "ct2"]  # no temporaries


def test_annotated_layer_norm_is_refused_naming_the_option(tmp_path):
    from decoderkit import make_model
    from decoderkit.training.seq2seq.checkpoint import load_checkpoint, save_checkpoint
    from decoderkit.text.seq2seq.tokenizer import Tokenizer

    tok = Tokenizer.characters(["abc"])
    model = make_model(tok.vocab_size, tok.vocab_size, N=1, d_model=8, d_ff=16, h=2,
                       layer_norm="annotated")
    save_checkpoint(tmp_path / "ckpt", model, tok, tok, step=0)
    with pytest.raises(UsageError, match="layer_norm='annotated'"):
        export_ctranslate2(load_checkpoint(tmp_path / "ckpt"), tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()


def test_missing_package_names_the_extra(tmp_path, monkeypatch):
    import sys

    ckpt = random_checkpoint(tmp_path / "ckpt", norm_first=False, tied=False)
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import now raises ImportError
    monkeypatch.setitem(sys.modules, "ctranslate2.specs", None)
    with pytest.raises(UsageError, match=r'pip install "decoderkit\[export\]"'):
        export_ctranslate2(ckpt, tmp_path / "ct2")
