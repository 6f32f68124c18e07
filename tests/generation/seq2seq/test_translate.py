"""``translate_lines`` and ``decoderkit translate`` end to end on a tiny saved checkpoint."""

from __future__ import annotations

import copy
import dataclasses
import io
import json

import pytest
import torch

from decoderkit import make_model
from decoderkit.cli import main
from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.decoding import greedy_decode
from decoderkit.generation.seq2seq.bounds import default_max_len
from decoderkit.generation.seq2seq.search import beam_search
from decoderkit.generation.seq2seq.translate import DecodeOptions, translate_lines
from decoderkit.training.seq2seq.checkpoint import load_checkpoint, save_checkpoint
from decoderkit.text.seq2seq.tokenizer import Tokenizer

LINES = ["abc", "hgfedcba", "", "ca"]


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    tok = Tokenizer.characters(["abcdefgh"])  # 4 specials + 8 characters
    torch.manual_seed(0)
    model = make_model(tok.vocab_size, tok.vocab_size, N=1, d_model=16, d_ff=32, h=2,
                       dropout=0.0, max_len=40)
    with torch.no_grad():
        model.generator.proj.bias[2] += 2.0  # EOS likely: outputs of varied lengths
    path = tmp_path_factory.mktemp("ckpt") / "run"
    save_checkpoint(path, model, tok, tok, step=1)
    return path


def reference(ckpt, line, method, **kw):
    """One line decoded alone by the library calls with the default bound, detokenized."""
    ids = ckpt.src_tokenizer.encode(line)
    bound = default_max_len(len(ids), ckpt.config.max_len)
    out = method(ckpt.model, torch.tensor([ids]), None, max_len=bound, **kw)
    return ckpt.tgt_tokenizer.decode(out.tokens[0, :int(out.lengths[0])].tolist())


@pytest.mark.parametrize("flags,method,kw", [
    ([], greedy_decode, {}),
    (["--beam", "3"], beam_search, {"beam_size": 3}),
    (["--beam", "3", "--workers", "2"], beam_search, {"beam_size": 3}),
    (["--compile"], greedy_decode, {}),
])
def test_cli_output_equals_each_line_decoded_alone(ckpt_dir, capsys, flags, method, kw):
    assert main(["translate", "--checkpoint", str(ckpt_dir), "--batch-size", "2", *flags,
                 *LINES]) == 0
    got = capsys.readouterr().out.splitlines()
    ckpt = load_checkpoint(ckpt_dir)
    expect = [reference(ckpt, line, method, **kw) if line else "" for line in LINES]
    assert got == expect


def test_cli_reads_stdin_one_line_each(ckpt_dir, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"abc\nca\n")))
    assert main(["translate", "--checkpoint", str(ckpt_dir)]) == 0
    from_stdin = capsys.readouterr().out
    assert main(["translate", "--checkpoint", str(ckpt_dir), "abc", "ca"]) == 0
    assert from_stdin == capsys.readouterr().out and len(from_stdin.splitlines()) == 2


def test_cli_sampling_is_reproducible_with_a_seed(ckpt_dir, capsys):
    argv = ["translate", "--checkpoint", str(ckpt_dir), "--sample", "--top-p", "0.9",
            "--temperature", "1.3", "--seed", "5", *LINES]
    outputs = []
    for _ in range(2):
        assert main(argv) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]


def test_cli_explain_prints_alternatives_and_writes_json(ckpt_dir, capsys, tmp_path):
    out = tmp_path / "explain.json"
    assert main(["translate", "--checkpoint", str(ckpt_dir), "--explain", "--explain-top", "3",
                 "--explain-out", str(out), "abc"]) == 0
    printed = capsys.readouterr().out.splitlines()
    doc = json.loads(out.read_text())
    assert doc["written_by"] == "decoderkit translate output file"
    data = doc["results"]
    assert len(data) == 1 and data[0]["text"] == printed[0]
    steps = data[0]["steps"]
    assert len(printed) == 1 + len(steps) and printed[1].startswith("  step 0:")
    assert data[0]["source_tokens"] == ["a", "b", "c"]
    for t, s in enumerate(steps):
        assert len(s["alternatives"]) == 3
        assert [len(w) for w in s["self_attention"][0]] == [t + 1, t + 1]  # heads x positions
        assert [len(w) for w in s["cross_attention"][0]] == [3, 3]


@pytest.mark.parametrize("argv,message", [
    (["--beam", "2", "--sample"], "exclude"),
    (["--explain-out", "x.json"], "--explain"),
    (["--top-p", "0"], "--top-p"),
    (["--sample", "--temperature", "1e-308"], "temperature must be a finite number in "
     "[1.18e-38, 100] for a float32 model (below, it is 0 in float32)"),
    (["--sample", "--top-p", "1e-300"], "top_p must be a finite number in "
     "[1.18e-38, 1.0] for a float32 model"),
    (["--sample", "--seed", str(2 ** 32)], "--seed"),
    (["--autotune"], "--compile"),
    (["--workers", "2", "--compile"], "give --workers 1 with --compile"),
    (["--workers", "0"], "--workers"),
])
def test_cli_user_errors_exit_2_with_one_line(ckpt_dir, capsys, argv, message):
    assert main(["translate", "--checkpoint", str(ckpt_dir), *argv, "abc"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_missing_checkpoint_is_a_user_error(tmp_path, capsys):
    assert main(["translate", "--checkpoint", str(tmp_path / "none"), "abc"]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_translate_lines_reports_scores_and_stop_reasons(ckpt_dir):
    ckpt = load_checkpoint(ckpt_dir)
    results = translate_lines(ckpt, LINES, DecodeOptions(max_len=3))
    assert [r.source for r in results] == LINES
    assert all(r.stop_reason in ("eos", "max_len") for r in results)
    assert results[2].text == "" and results[2].score == 0.0
    with pytest.raises(ValueError, match="exclude"):
        DecodeOptions(beam=2, sample=True)


@pytest.fixture(scope="module")
def rambling(tmp_path_factory):
    """A checkpoint whose model rarely emits EOS: lines run to their length bound."""
    tok = Tokenizer.characters(["abcdefgh"])
    torch.manual_seed(1)
    model = make_model(tok.vocab_size, tok.vocab_size, N=1, d_model=16, d_ff=32, h=2,
                       dropout=0.0, max_len=40)
    with torch.no_grad():
        model.generator.proj.bias[2] -= 4.0  # EOS unlikely
        model.generator.proj.bias[3] -= 20.0  # <unk> (decoded to nothing) never chosen
    path = tmp_path_factory.mktemp("ckpt") / "rambling"
    save_checkpoint(path, model, tok, tok, step=1)
    return load_checkpoint(path)


@pytest.mark.parametrize("options", [
    DecodeOptions(),
    DecodeOptions(beam=3),
    DecodeOptions(sample=True, seed=11, temperature=1.2),
])
def test_a_line_in_a_batch_translates_as_it_does_alone(rambling, options):
    """Per-line length bound (from the line's own source) and per-line sampling stream: the
    short line among longer ones gives exactly what it gives alone."""
    short, longer = "ca", ["hgfedcbahgfedcba", "abcdefgh"]
    alone = translate_lines(rambling, [short], options)[0]
    for lines in ([*longer, short], [short, *longer], [longer[0], short, short]):
        results = translate_lines(rambling, lines, options, batch_size=3)
        got = results[lines.index(short)]
        assert (got.text, got.stop_reason) == (alone.text, alone.stop_reason)
        assert got.score == pytest.approx(alone.score, abs=1e-5)
    assert len(alone.text) <= default_max_len(2, rambling.config.max_len)



def test_batches_hold_lines_of_similar_length_and_results_keep_the_input_order(
        rambling, monkeypatch):
    """Lines are batched sorted by source length (Marian's maxi-batch: little padding, rows
    that end together); each result is still the line's own, in the order given."""
    import decoderkit.generation.seq2seq.translate as translate

    widths, decode = [], translate._decode
    monkeypatch.setattr(translate, "_decode", lambda model, src, *rest: (
        widths.append((src.size(0), src.size(1))), decode(model, src, *rest))[1])
    lines = ["abcdefghabcdefgh", "ca", "abcdefgh", "c", "abcdefghabcd", "abc"]
    results = translate_lines(rambling, lines, DecodeOptions(beam=2), batch_size=2)
    assert widths == [(2, 2), (2, 8), (2, 16)]  # (1, 2), (3, 8), (12, 16) tokens
    alone = [translate_lines(rambling, [line], DecodeOptions(beam=2))[0] for line in lines]
    assert [r.source for r in results] == lines
    assert [r.text for r in results] == [r.text for r in alone]


@pytest.mark.parametrize("options", [DecodeOptions(beam=3), DecodeOptions(int8=True)])
def test_workers_decode_batches_at_once_with_the_same_results(rambling, options):
    """workers=2: batches on two threads at once, torch's threads shared among them for the call
    (restored after); every line's result as with one worker, in the order given."""
    from decoderkit.generation.int8 import int8_available

    if options.int8 and not int8_available():
        pytest.skip("no fbgemm int8 engine")
    lines = ["abcdefghabcdefgh", "ca", "abcdefgh", "c", "", "abcdefghabcd", "abc", "hgf"]
    one = translate_lines(rambling, lines, options, batch_size=2)
    before = torch.get_num_threads()
    two = translate_lines(rambling, lines, options, batch_size=2, workers=2)
    assert torch.get_num_threads() == before
    assert [(r.source, r.tokens, r.score) for r in two] == \
        [(r.source, r.tokens, r.score) for r in one]
    with pytest.raises(UsageError, match="workers 2 decodes .* a compile step .* give workers 1"):
        translate_lines(rambling, lines, dataclasses.replace(options, compile=True),
                        workers=2)
    with pytest.raises(UsageError, match="workers must be an integer >= 1, got 0"):
        translate_lines(rambling, lines, options, workers=0)


def test_the_default_bound_follows_each_lines_own_source(rambling):
    lines = ["ca", "abcdefghabcdefghabcd"]  # 2 and 20 tokens
    results = translate_lines(rambling, lines, DecodeOptions())
    for line, r in zip(lines, results, strict=True):
        assert r.stop_reason == "max_len"  # this model runs to the bound
        bound = default_max_len(len(line), rambling.config.max_len)
        assert len(rambling.tgt_tokenizer.encode(r.text)) == bound
    assert default_max_len(2, 40) < default_max_len(20, 40) == 40  # capped at the model's


def test_a_line_too_long_for_the_model_is_an_error_result_not_an_abort(rambling):
    too_long = "a" * 41  # the model's max_len is 40
    lines = ["abc", too_long, "", "ca"]
    results = translate_lines(rambling, lines, DecodeOptions())
    assert [r.error is None for r in results] == [True, False, True, True]
    bad = results[1]
    assert "41 tokens" in bad.error and "max_len 40" in bad.error
    assert (bad.text, bad.stop_reason, bad.source) == ("", "error", too_long)
    assert json.loads(json.dumps(bad.to_dict()))["error"] == bad.error
    alone = translate_lines(rambling, ["abc", "ca"], DecodeOptions())
    assert [r.text for r in results if r.source in ("abc", "ca")] == [r.text for r in alone]
    assert results[2].text == "" and results[2].error is None


@pytest.mark.parametrize("kw,match", [
    ({"beam": 0}, r"beam must be an integer >= 1, got 0"),
    ({"beam": 2.0}, r"beam .* got 2\.0"),
    ({"length_penalty": float("nan")}, r"length_penalty .* got nan"),
    ({"length_penalty": float("inf")}, r"length_penalty .* got inf"),
    ({"temperature": float("inf"), "sample": True}, r"temperature .* got inf"),
    ({"top_k": -1, "sample": True}, r"top_k .* got -1"),
    ({"top_p": 2.0, "sample": True}, r"top_p .* got 2\.0"),
    ({"seed": 1.5}, r"seed .* got 1\.5"),
    ({"max_len": 0}, r"max_len .* got 0"),
    ({"explain": -1}, r"explain .* got -1"),
    ({"sample": 1}, r"sample must be a bool, got 1"),
])
def test_decode_options_refuse_bad_values_naming_them(kw, match):
    with pytest.raises(UsageError, match=match):
        DecodeOptions(**kw)


def test_translate_lines_refuses_bad_call_arguments(rambling):
    with pytest.raises(UsageError, match=r"batch_size must be an integer >= 1, got 0"):
        translate_lines(rambling, ["abc"], DecodeOptions(), batch_size=0)
    with pytest.raises(UsageError, match=r"max_len must be an integer in \[1, 40\], got 41"):
        translate_lines(rambling, ["abc"], DecodeOptions(max_len=41))


def test_explain_out_never_replaces_a_users_file(ckpt_dir, capsys, tmp_path):
    mine = tmp_path / "notes.json"
    mine.write_text("[1, 2]")
    argv = ["translate", "--checkpoint", str(ckpt_dir), "--explain", "abc", "--explain-out"]
    assert main([*argv, str(mine)]) == 2
    captured = capsys.readouterr()
    assert "--explain-out" in captured.err and "not written by decoderkit translate" in \
        captured.err and captured.out == ""  # refused before translating
    assert mine.read_text() == "[1, 2]"
    ours = tmp_path / "explain.json"
    for _ in range(2):
        assert main([*argv, str(ours)]) == 0
    assert json.loads(ours.read_text())["written_by"] == "decoderkit translate output file"


def test_sampling_values_are_checked_against_the_models_own_dtype(rambling):
    """1e-300 is a normal float64 but 0 in float32: accepted by DecodeOptions (no model yet),
    refused for the float32 checkpoint before any line is decoded, used by a float64 one
    (where it is greedy decoding); 1e-320 is a denormal even in float64."""
    options = DecodeOptions(sample=True, temperature=1e-300, seed=4)
    with pytest.raises(UsageError, match=r"temperature .*1.18e-38.* float32 "
                                         r"model .* got 1e-300"):
        translate_lines(rambling, ["abc", "hgfedcba"], options)
    wide = dataclasses.replace(rambling, model=copy.deepcopy(rambling.model).double())
    got = [r.text for r in translate_lines(wide, ["abc", "hgfedcba"], options)]
    assert got == [reference(wide, line, greedy_decode) for line in ["abc", "hgfedcba"]]
    with pytest.raises(UsageError, match=r"top_p .*2.23e-308.* float64 model"):
        translate_lines(wide, ["abc"], DecodeOptions(sample=True, top_p=1e-320))


@pytest.mark.parametrize("options", [DecodeOptions(), DecodeOptions(sample=True, seed=2),
                                     DecodeOptions(beam=3)], ids=["greedy", "sample", "beam"])
def test_ban_unk_never_chooses_unk_and_keeps_the_other_choices(ckpt_dir, options):
    """``ban_unk`` (a Marian .npz model's, as Marian's translator without --allow-unk): an
    <unk> the model favours is never chosen; greedy and sampling choose as the same model
    whose <unk> logit is -inf (an independent reference), beam search never holds it."""
    ckpt = load_checkpoint(ckpt_dir)
    unk = ckpt.tgt_tokenizer.hf.token_to_id("<unk>")
    with torch.no_grad():
        ckpt.model.generator.proj.bias[unk] += 3.0
    lines = ["abc", "hgfedcba", "ca", "bad", "cafe"]
    free = translate_lines(ckpt, lines, options)
    assert sum("<unk>" in r.tokens for r in free) >= 3  # the ban has work to do
    banned = translate_lines(ckpt, lines, dataclasses.replace(options, ban_unk=True))
    assert not any("<unk>" in r.tokens for r in banned)
    if options.beam == 1:
        without = dataclasses.replace(ckpt, model=copy.deepcopy(ckpt.model))
        with torch.no_grad():
            without.model.generator.proj.bias[unk] = float("-inf")
        assert [r.tokens for r in banned] == [r.tokens for r in
                                              translate_lines(without, lines, options)]
