"""Marian directories through every command: translate, eval, params, convert, fine-tuning
with train --resume, and export to CTranslate2 (against CTranslate2's own converter)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from interop.marian_helpers import hf_model, hf_tokenizer, sources, write_marian

from decoderkit.cli import main
from decoderkit.generation.seq2seq.settings import GenerationSettings, generation_settings
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.training.seq2seq.checkpoint import load_checkpoint as load_decoderkit_checkpoint


FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    return write_marian(tmp_path_factory.mktemp("opus"), seed=12, eos_bias=1.5)


@pytest.fixture(scope="module")
def converted(marian_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("converted") / "ckpt"
    assert main(["convert", "--from", "marian", str(marian_dir), "--out", str(out)]) == 0
    return out


def _hf_greedy(marian_dir, lines, max_len):
    theirs, tok = hf_model(marian_dir), hf_tokenizer(marian_dir)
    enc = tok(lines, return_tensors="pt", padding=True)
    out = theirs.generate(**enc, num_beams=1, max_length=max_len + 1,  # its own forced EOS
                          bad_words_ids=[[theirs.config.pad_token_id]])
    return tok.batch_decode(out, skip_special_tokens=True)


def test_translate_a_marian_directory_equals_hf(marian_dir, capsys):
    lines = sources(6, seed=21)
    assert main(["translate", "--checkpoint", str(marian_dir), "--max-len", "20", *lines]) == 0
    assert capsys.readouterr().out.splitlines() == _hf_greedy(marian_dir, lines, 20)


def test_translate_beam_of_a_marian_directory_equals_hf(marian_dir, capsys):
    """A Marian checkpoint's beam rule is HF's (retire ended hypotheses); ours on request."""
    lines = sources(8, seed=26)
    theirs, tok = hf_model(marian_dir), hf_tokenizer(marian_dir)
    enc = tok(lines, return_tensors="pt", padding=True)
    ref = theirs.generate(**enc, num_beams=4, max_length=21,
                          bad_words_ids=[[theirs.config.pad_token_id]], early_stopping=False)
    assert main(["translate", "--checkpoint", str(marian_dir), "--beam", "4", "--max-len", "20",
                 *lines]) == 0
    assert capsys.readouterr().out.splitlines() == tok.batch_decode(ref, skip_special_tokens=True)
    assert main(["translate", "--checkpoint", str(marian_dir), "--beam", "4", "--max-len", "20",
                 "--beam-rule", "stay", *lines]) == 0
    capsys.readouterr()


def test_a_directory_decodes_with_its_own_generation_settings(marian_dir, tmp_path, capsys):
    """No flags: num_beams, max_length and forced_eos_token_id from generation_config.json, as
    ``generate()`` with no arguments; each flag still wins. A ban of several tokens refused."""
    import json
    import shutil

    own = shutil.copytree(marian_dir, tmp_path / "own")
    settings = json.loads((own / "generation_config.json").read_text())
    settings |= {"num_beams": 3, "max_length": 9, "forced_eos_token_id": 0}
    (own / "generation_config.json").write_text(json.dumps(settings))
    lines = sources(6, seed=31)
    theirs, tok = hf_model(own), hf_tokenizer(own)
    want = tok.batch_decode(theirs.generate(**tok(lines, return_tensors="pt", padding=True)),
                            skip_special_tokens=True)
    assert main(["translate", "--checkpoint", str(own), *lines]) == 0
    assert capsys.readouterr().out.splitlines() == want
    assert generation_settings(load_checkpoint(own).meta) == GenerationSettings(
        beam=3, max_len=8, forced_eos=True)
    assert main(["translate", "--checkpoint", str(own), "--beam", "1", "--max-len", "20",
                 *lines]) == 0
    assert capsys.readouterr().out.splitlines() == _hf_greedy(own, lines, 20)
    settings["bad_words_ids"] = [[5, 6]]
    (own / "generation_config.json").write_text(json.dumps(settings))
    capsys.readouterr()  # HF's own progress lines
    assert main(["translate", "--checkpoint", str(own), "x"]) == 2
    err = capsys.readouterr().err
    assert "generation_config.json: bad_words_ids" in err and err.count("\n") == 1


def test_converted_checkpoint_gives_the_same_tokens(marian_dir, converted, capsys):
    lines = sources(8, seed=22)
    for beam in ("1", "4"):
        outputs = []
        for where in (marian_dir, converted):
            assert main(["translate", "--checkpoint", str(where), "--beam", beam,
                         "--max-len", "20", *lines]) == 0
            outputs.append(capsys.readouterr().out)
        assert outputs[0] == outputs[1]
    a, b = load_checkpoint(marian_dir), load_decoderkit_checkpoint(converted)
    assert a.config == b.config
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(),
                                                 b.model.state_dict().values(), strict=True))
    assert [b.src_tokenizer.encode(t) for t in lines] == [a.src_tokenizer.encode(t) for t in lines]


def test_convert_keeps_the_run_directory_rules(marian_dir, converted, tmp_path, capsys):
    assert main(["convert", "--from", "marian", str(marian_dir), "--out", str(converted)]) == 2
    assert "already holds a checkpoint" in capsys.readouterr().err
    users = tmp_path / "mine"
    users.mkdir()
    (users / "notes.txt").write_text("keep me")
    assert main(["convert", "--from", "marian", str(marian_dir), "--out", str(users),
                 "--overwrite"]) == 2
    assert "notes.txt" in capsys.readouterr().err and (users / "notes.txt").exists()
    assert main(["convert", "--from", "marian", str(tmp_path), "--out",
                 str(tmp_path / "x")]) == 2
    assert "config.json" in capsys.readouterr().err
    lm = shutil.copytree(FIXTURES / "lm_train_75f131b" / "run", tmp_path / "lm")
    assert main(["convert", "--from", "marian", str(lm), "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip().endswith(  # what the directory is, not a key
        "is not a directory with a config.json whose model_type is 'marian'; it is an lm "
        "train run directory, a language model")
    assert main(["convert", "--from", "marian", str(marian_dir), "--out", str(lm)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"--out {lm} is an lm train run directory, a language model, not a run of `decoderkit "
        f"train`: choose another --out (resume it with `decoderkit lm train --resume --out {lm}`)")


def test_params_and_eval_take_a_marian_directory(marian_dir, tmp_path, capsys):
    assert main(["params", "--checkpoint", str(marian_dir)]) == 0
    table = capsys.readouterr().out
    total = sum(p.numel() for p in load_checkpoint(marian_dir).model.parameters())
    assert f"{total:,}" in table
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{s[::-1]}\n" for s in tsv_sources(10, seed=23)))
    assert main(["eval", "--checkpoint", str(marian_dir), "--data", str(tsv)]) == 0
    assert "10 pairs" in capsys.readouterr().out


def test_fine_tune_one_step_from_a_converted_checkpoint(marian_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["convert", "--from", "marian", str(marian_dir), "--out", str(run)]) == 0
    before = load_decoderkit_checkpoint(run).model.state_dict()
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{s.upper()}\n" for s in tsv_sources(40, seed=24)))
    assert main(["train", "--resume", "--out", str(run), "--data", str(tsv), "--max-steps", "1",
                 "--valid-every", "1", "--batch-size", "8", "--quiet", "--show", "0"]) == 0
    after = load_decoderkit_checkpoint(run)
    assert after.step == 1 and after.config == load_checkpoint(marian_dir).config
    assert after.meta["data"]["tsv"] and after.meta["history"]
    changed = [k for k, v in after.model.state_dict().items() if not torch.equal(v, before[k])]
    assert "generator.proj.bias" in changed and len(changed) > 10
    # the fine-tuned run goes on like any run: a second step resumes its trainer state
    assert main(["train", "--resume", "--out", str(run), "--data", str(tsv), "--max-steps", "2",
                 "--valid-every", "1", "--batch-size", "8", "--quiet", "--show", "0"]) == 0
    assert load_decoderkit_checkpoint(run).step == 2
    capsys.readouterr()


def test_ctranslate2_export_equals_ctranslate2s_own_converter(marian_dir, converted, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from decoderkit.generation.seq2seq.translate import DecodeOptions
    from decoderkit.interop.seq2seq.ctranslate2 import Ctranslate2Engine

    assert main(["export", "--to", "ctranslate2", "--checkpoint", str(converted), "--out",
                 str(tmp_path / "ours")]) == 0
    ctranslate2.converters.TransformersConverter(str(marian_dir)).convert(str(tmp_path / "ref"))
    reference = ctranslate2.Translator(str(tmp_path / "ref"), device="cpu")
    ours = Ctranslate2Engine(tmp_path / "ours")
    tok = load_checkpoint(marian_dir).src_tokenizer
    lines = sources(20, seed=25)
    for beam in (1, 4):
        got = ours.translate_lines(lines, DecodeOptions(beam=beam, max_len=20))
        # CTranslate2's converter drops <pad> from the vocabulary (never generated there) and
        # starts decoding from a zero embedding: the pad row, zero in Marian models. Our
        # engine's settings: no minimum length (CTranslate2's default forbids EOS first)
        ref = reference.translate_batch([tok.tokens(tok.encode(t)) for t in lines],
                                        beam_size=beam, max_decoding_length=20,
                                        min_decoding_length=0, return_end_token=True)
        assert [r.text for r in got] == [ours.tgt_tokenizer.decode(
            [ours.tgt_ids[p] for p in out.hypotheses[0]]) for out in ref]


def tsv_sources(n: int, seed: int) -> list[str]:
    """``sources`` without TABs (a TSV field cannot hold one)."""
    return [s.replace("\t", " ") for s in sources(n, seed)]


def test_export_to_transformers_loads_in_hf_with_the_same_outputs(marian_dir, tmp_path,
                                                                  capsys):
    transformers = pytest.importorskip("transformers")
    run = tmp_path / "run"
    assert main(["convert", "--from", "marian", str(marian_dir), "--out", str(run)]) == 0
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{s.upper()}\n" for s in tsv_sources(30, seed=27)))
    assert main(["train", "--resume", "--out", str(run), "--data", str(tsv), "--max-steps", "1",
                 "--valid-every", "1", "--batch-size", "8", "--quiet", "--show", "0"]) == 0
    out = tmp_path / "hf"
    assert main(["export", "--to", "transformers", "--checkpoint", str(run), "--out",
                 str(out)]) == 0
    ours = load_decoderkit_checkpoint(run)
    theirs = transformers.MarianMTModel.from_pretrained(out).eval()
    tok, original = hf_tokenizer(out), hf_tokenizer(marian_dir)
    lines = sources(30, seed=28)
    assert [tok(t).input_ids for t in lines] == [original(t).input_ids for t in lines]
    assert [tok(text_target=t).input_ids for t in lines] == \
        [original(text_target=t).input_ids for t in lines]
    enc = tok(lines, return_tensors="pt", padding=True)
    c = ours.config
    tgt = torch.randint(0, c.tgt_vocab, (len(lines), 6), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = c.bos_id
    from decoderkit.nn.masks import causal_mask, padding_mask

    with torch.no_grad():
        ref = torch.log_softmax(theirs(**enc, decoder_input_ids=tgt).logits, dim=-1)
        got = ours.model.generator(ours.model(enc.input_ids, tgt,
                                              padding_mask(enc.input_ids, c.pad_id),
                                              causal_mask(6)))
    assert (got - ref).abs().max() <= 1e-5
    generated = theirs.generate(**enc, num_beams=1, max_length=21, forced_eos_token_id=None)
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(run), "--max-len", "20", *lines]) == 0
    assert capsys.readouterr().out.splitlines() == tok.batch_decode(generated,
                                                                    skip_special_tokens=True)


def test_export_to_transformers_refuses_a_checkpoint_trained_here(tmp_path, capsys):
    from conftest import tiny_checkpoint

    ckpt = tiny_checkpoint(tmp_path / "ckpt")
    assert main(["export", "--to", "transformers", "--checkpoint", str(ckpt), "--out",
                 str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "sentencepiece" in err and "BPE" in err and not (tmp_path / "hf").exists()


def test_serve_answers_with_a_marian_directory(marian_dir):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from decoderkit.serve.seq2seq.app import create_app

    lines = sources(3, seed=29)
    ckpt = load_checkpoint(marian_dir)
    with TestClient(create_app(ckpt)) as client:
        r = client.post("/v1/translate", json={"inputs": lines, "beam": 4, "max_len": 20,
                                               "explain": 2})
    assert r.status_code == 200, r.text
    assert all(x["steps"] for x in r.json()["results"])  # traced by our beam rule (README)
    with TestClient(create_app(ckpt)) as client:
        r = client.post("/v1/translate", json={"inputs": lines, "beam": 4, "max_len": 20})
    assert [x["text"] for x in r.json()["results"]] == _hf_beam(marian_dir, lines, 20)


def _hf_beam(marian_dir, lines, max_len):
    theirs, tok = hf_model(marian_dir), hf_tokenizer(marian_dir)
    enc = tok(lines, return_tensors="pt", padding=True)
    out = theirs.generate(**enc, num_beams=4, max_length=max_len + 1,
                          bad_words_ids=[[theirs.config.pad_token_id]], early_stopping=False)
    return tok.batch_decode(out, skip_special_tokens=True)


def test_onnx_export_of_a_marian_directory_translates_the_same(marian_dir, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    lines = sources(4, seed=30)
    out = tmp_path / "onnx"
    assert main(["export", "--to", "onnx", "--checkpoint", str(marian_dir), "--out",
                 str(out)]) == 0
    capsys.readouterr()
    outputs = []
    for flags in (["--checkpoint", str(marian_dir)], ["--engine", "onnxruntime", "--model",
                                                       str(out)]):
        assert main(["translate", *flags, "--max-len", "12", *lines]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].strip()


@pytest.mark.parametrize("beams", [1, 3])
def test_exports_decode_with_the_directorys_generation_settings(marian_dir, tmp_path, capsys,
                                                                 beams):
    """An export of a Marian directory carries its num_beams, max_length and forced EOS (the
    manifest): `translate --engine` with no flags prints what `generate()` prints. CTranslate2's
    own beam search stops once its beam has ended (ctranslate2's module docstring), so at beam
    3 it is held to the same settings given as flags."""
    import json
    import shutil

    own = shutil.copytree(marian_dir, tmp_path / "own")
    settings = json.loads((own / "generation_config.json").read_text())
    settings |= {"num_beams": beams, "max_length": 9, "forced_eos_token_id": 0}
    (own / "generation_config.json").write_text(json.dumps(settings))
    lines = sources(8, seed=33)
    theirs, tok = hf_model(own), hf_tokenizer(own)
    want = tok.batch_decode(theirs.generate(**tok(lines, return_tensors="pt", padding=True)),
                            skip_special_tokens=True)
    assert any(len(tok(w).input_ids) >= 8 for w in want)  # some reach the limit: forced EOS
    for to, engine in {"onnx": "onnxruntime", "ctranslate2": "ctranslate2"}.items():
        pytest.importorskip(engine)
        out = tmp_path / to
        assert main(["export", "--to", to, "--checkpoint", str(own), "--out", str(out)]) == 0
        capsys.readouterr()
        assert main(["translate", "--engine", engine, "--model", str(out), *lines]) == 0
        got = capsys.readouterr().out.splitlines()
        if engine == "ctranslate2" and beams > 1:
            assert main(["translate", "--engine", engine, "--model", str(out), "--beam",
                         str(beams), "--max-len", "8", *lines]) == 0
            want = capsys.readouterr().out.splitlines()
        assert got == want, engine


def test_export_to_transformers_refuses_a_source_padded_with_another_id(marian_dir, tmp_path):
    """Hugging Face's one pad_token_id pads both sides: a model whose source pads with another
    id (Marian's separate vocabularies of different sizes) is refused, naming it."""
    import dataclasses

    from decoderkit.base.errors import UsageError
    from decoderkit.interop.marian.hf_export import export_transformers

    ckpt = load_checkpoint(marian_dir)
    c = ckpt.config
    ckpt.config = dataclasses.replace(c, src_pad_id=c.pad_id - 1)
    with pytest.raises(UsageError, match=f"source_pad_id={c.pad_id - 1} .*Marian: {c.pad_id}"):
        export_transformers(ckpt, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
