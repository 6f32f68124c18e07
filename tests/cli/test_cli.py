"""The command line: exit codes, one-line errors, help on every flag, and each tool command."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

import decoderkit.cli.bench
from conftest import assert_picture, tiny_checkpoint
from decoderkit import make_model
from decoderkit.cli import build_parser, main
from decoderkit.report import conformance
from decoderkit.report.seq2seq import seed_claims
from decoderkit.report.rows import Row
from decoderkit.report.params import count_parameters


def one_line_error(capsys, argv: list[str], *needles: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


def test_every_subcommand_exists_and_every_flag_has_help():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) >= {"train", "translate", "eval", "params", "figures", "check",
                                "bench"}
    for name, cmd in sub.choices.items():
        for action in cmd._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"decoderkit {name} {action.dest}: no help text"


def test_help_exits_zero_and_usage_errors_are_one_line(capsys):
    assert main(["--help"]) == 0
    assert "params" in capsys.readouterr().out
    one_line_error(capsys, [], "required")
    one_line_error(capsys, ["nonsense"], "invalid choice")
    one_line_error(capsys, ["params", "--layers", "two"], "--layers", "expected an integer")


def test_params_default_prints_the_seed_000_numbers(capsys):
    assert main(["params"]) == 0
    out = capsys.readouterr().out
    assert "4,204,032" in out and "25,224,192" in out and "18,944,000 + 37,000" in out


@pytest.mark.parametrize("preset, total", [("gpt2", "124,439,808"), ("gpt2-xl", "1,557,611,200"),
                                           ("gpt1", "116,534,784")])
def test_params_preset_prints_the_published_lm_counts(capsys, preset, total):
    assert main(["params", "--preset", preset]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("total")][0]
    assert line.split()[-1] == total
    one_line_error(capsys, ["params", "--preset", "gpt5"], "--preset", "invalid choice")


def test_params_total_matches_a_live_model_and_counts_shared_weights_once(capsys):
    flags = ["--src-vocab", "50", "--tgt-vocab", "50", "--layers", "2", "--d-model", "16",
             "--heads", "2", "--d-ff", "24"]
    for tie, extra in ((False, []), (True, ["--tie-embeddings", "--tie-generator"])):
        assert main(["params", *flags, *extra]) == 0
        out = capsys.readouterr().out
        model = make_model(50, 50, N=2, d_model=16, d_ff=24, h=2, tie_embeddings=tie,
                           tie_generator=tie)
        total = [line for line in out.splitlines() if line.startswith("total")][0]
        assert int(total.split()[-1].replace(",", "")) == count_parameters(model)
        assert ("shared with the target embedding" in out) == tie


def test_params_bad_config_and_missing_checkpoint_are_one_line(capsys, tmp_path):
    one_line_error(capsys, ["params", "--d-model", "30", "--heads", "8"], "d_model", "n_heads")
    one_line_error(capsys, ["params", "--checkpoint", str(tmp_path)], "--checkpoint",
                   "config.json")


def test_params_reads_a_checkpoint_config(capsys, tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "ckpt")
    assert main(["params", "--checkpoint", str(ckpt)]) == 0
    assert "N=1, d_model=16, heads=2, d_ff=32" in capsys.readouterr().out


def test_check_exit_status_follows_the_rows(capsys, monkeypatch):
    rows = [Row("000 §3", "ok claim", "1", "1", "pass"),
            Row("004", "known slip", "2", "3", "erratum")]
    monkeypatch.setattr(conformance, "run_checks", lambda checks: list(rows))
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "ok claim" in out and "1 pass, 1 erratum" in out
    assert main(["check", "--problems"]) == 0
    assert "ok claim" not in capsys.readouterr().out
    rows.append(Row("self", "broken", "0", "1", "FAIL"))
    assert main(["check"]) == 1
    assert "broken" in capsys.readouterr().out


def test_check_source_selects_which_checks_run(monkeypatch):
    ran = []
    monkeypatch.setattr(conformance, "run_checks", lambda checks: ran.extend(checks) or [])
    assert main(["check", "--source", "002", "self"]) == 0
    assert {conformance.check_source(c) for c in ran} == {"002", "self"}
    assert seed_claims.seed002 in ran and seed_claims.seed000_attention not in ran


def test_check_runs_the_real_report_for_one_seed(capsys):
    assert main(["check", "--source", "001"]) == 0
    out = capsys.readouterr().out
    assert "512 features = 8 heads x 64" in out and "FAIL" not in out


def test_figures_writes_the_chosen_files(capsys, tmp_path):
    assert main(["figures", "--out", str(tmp_path), "--only", "warmup", "norm_axes",
                 "--format", "png", "--dpi", "50"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["norm_axes.png", "warmup.png"]
    assert_picture(tmp_path / "warmup.png", min_px=100)
    assert str(tmp_path / "warmup.png") in capsys.readouterr().out


def test_figures_attention_maps_from_a_checkpoint(capsys, tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "ckpt")
    assert main(["figures", "--out", str(tmp_path / "f"), "--only", "attention",
                 "--checkpoint", str(ckpt), "--text", "29", "--format", "png"]) == 0
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["attention_cross.png",
                                                                  "attention_self.png"]


def test_figures_bad_input_is_one_line(capsys, tmp_path):
    one_line_error(capsys, ["figures", "--out", str(tmp_path), "--only", "nope"], "nope")
    one_line_error(capsys, ["figures", "--out", str(tmp_path), "--only", "attention"],
                   "--checkpoint")
    one_line_error(capsys, ["figures", "--out", str(tmp_path), "--format", "gif"], "gif")
    one_line_error(capsys, ["figures"], "--out")
    one_line_error(capsys, ["figures", "--out", ""], "argument --out: expected a path, got ''")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    one_line_error(capsys, ["figures", "--out", str(tmp_path / "loop")], "cannot resolve")


def test_bench_lists_runs_with_passed_flags_and_rejects_unknown_names(capfd, monkeypatch,
                                                                      tmp_path):
    (tmp_path / "echo_args.py").write_text(
        '"""Prints its arguments."""\nimport sys\nif __name__ == "__main__":\n'
        '    print("ARGS", sys.argv[1:])\n    sys.exit(3)\n')
    (tmp_path / "shared.py").write_text('"""What scripts import."""\nX = 1\n')  # no main
    monkeypatch.setattr(decoderkit.cli.bench, "benchmarks_dir", lambda: tmp_path)
    assert main(["bench", "--list"]) == 0
    out = capfd.readouterr().out
    assert "echo_args" in out and "Prints its arguments." in out and "shared" not in out
    one_line_error(capfd, ["bench", "shared"], "unknown benchmark 'shared'", "echo_args")
    assert main(["bench", "echo_args", "--quick", "--batch", "16"]) == 3  # the script's status
    assert "ARGS ['--quick', '--batch', '16']" in capfd.readouterr().out
    one_line_error(capfd, ["bench", "no_such_benchmark"], "no_such_benchmark", "echo_args")
    one_line_error(capfd, ["bench"], "name a benchmark", "echo_args")
    monkeypatch.setattr(decoderkit.cli.bench, "benchmarks_dir", lambda: tmp_path / "missing")
    one_line_error(capfd, ["bench", "--list"], "no benchmark scripts")


@pytest.mark.parametrize("argv", [["bench", "--help"], ["figures", "--help"]])
def test_subcommand_help_exits_zero(capsys, argv):
    assert main(argv) == 0
    assert "usage" in capsys.readouterr().out


@pytest.mark.parametrize("extra", [[], ["--no-bias"], ["--norm-first", "--layer-norm",
                                                       "annotated"]])
def test_params_layer_counts_equal_their_closed_forms(capsys, extra):
    assert main(["params", "--d-model", "16", "--heads", "2", "--d-ff", "24", *extra]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "layer " in line
             and "=" in line]
    assert len(lines) == 2
    for line in lines:
        live, closed = line.split()[3], line.split("=")[-1].strip()
        assert live == closed, line


def test_figures_replace_their_own_files_but_never_a_users(capsys, tmp_path):
    flags = ["figures", "--out", str(tmp_path), "--only", "warmup", "--dpi", "20"]
    assert main(flags) == 0  # png and svg
    assert main(flags) == 0  # again: its own files, replaced
    capsys.readouterr()
    (tmp_path / "warmup.png").write_bytes(b"\x89PNG my own picture")
    one_line_error(capsys, flags, "--out", "warmup.png", "not written by decoderkit figures")
    assert (tmp_path / "warmup.png").read_bytes() == b"\x89PNG my own picture"


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """`decoderkit params | head -0`: exit 141 as a Unix tool, no traceback or error line."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    try:
        done = subprocess.run([sys.executable, "-m", "decoderkit", "params"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_a_command_imports_its_own_module_alone():
    """``main`` builds the parser of the command it is given: ``serve`` imports neither the
    grader (nbformat) nor the evaluator (sacrebleu), which only cost a server memory; the
    full parser (help, an unknown command) still lists every command."""
    code = ("import sys; from decoderkit.cli import build_parser; "
            "p = build_parser('serve'); p.parse_args(['serve', '--checkpoint', 'x']); "
            "print(sorted(m for m in ('decoderkit.cli.grade', 'decoderkit.grade', 'nbformat', "
            "'sacrebleu', 'decoderkit.cli.serve') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.split("\n")[0] == "['decoderkit.cli.serve']", out.stdout
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(sub.choices) == list(decoderkit.cli.COMMANDS)
