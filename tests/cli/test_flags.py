"""Every numeric flag of every subcommand, found from the parser itself (so commands added
later are covered too), is refused at the boundary when NaN, infinite, out of range or of the
wrong kind: one line naming the flag, exit 2, never a traceback."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import decoderkit.cli
from decoderkit.base.checks import MODEL_SIZES
from decoderkit.cli import build_parser, main

PROBES = ("nan", "inf", "-inf", "0", "-1", "0.5", "1e300", str(10**30), "", "x")

MISSING = "{tmp}/missing/x"  # a path that does not exist (under the test's own tmp_path)

# Arguments that make each command fail fast (before any real work) once its flags parse:
# a checkpoint or corpus that does not exist. A command missing here (one added later) is
# only parsed: its run() is replaced by a stub, since its required inputs are unknown here.
FAST_FAIL = {
    "train": ["--data", MISSING, "--out", MISSING],
    "translate": ["--checkpoint", MISSING, "x"],
    "eval": ["--checkpoint", MISSING],
    "params": ["--checkpoint", MISSING],
    "figures": ["--out", MISSING, "--only", "attention"],
    "lm train": ["--text", MISSING, "--out", MISSING],
    "lm sample": ["--checkpoint", MISSING, "--prompt", "x"],
    "lm eval": ["--checkpoint", MISSING, "--text", MISSING],
}


def subcommands(parser: argparse.ArgumentParser | None = None,
                prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every subcommand by its words ("train", "lm train"), nested ones included."""
    found = {}
    for action in (parser or build_parser())._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, cmd in action.choices.items():
                found[prefix + name] = cmd
                found |= subcommands(cmd, f"{prefix}{name} ")
    return found


def numeric_flags() -> list[tuple[str, argparse.Action]]:
    return [(name, action) for name, cmd in subcommands().items() for action in cmd._actions
            if action.type is not None and getattr(action.type, "span", None)]


def test_every_numeric_flag_is_range_checked_and_documents_its_range():
    found = numeric_flags()
    assert len(found) >= 30  # train, translate, eval, params, figures
    for name, cmd in subcommands().items():
        for action in cmd._actions:
            assert action.type not in (int, float), \
                f"decoderkit {name} {action.option_strings}: plain {action.type.__name__}; " \
                "use decoderkit.cli.args.integer() / number()"
    for name, action in found:
        assert action.type.span in action.help, (name, action.option_strings, action.help)


def required_args(cmd: argparse.ArgumentParser) -> list[str]:
    """Placeholder values for the required options of a command not in FAST_FAIL."""
    argv = []
    for action in cmd._actions:
        if action.required and action.option_strings:
            argv += [action.option_strings[0], MISSING]
    return argv


def run_probe(name: str, flag: str, value: str, parser: argparse.ArgumentParser,
              monkeypatch, tmp) -> int:
    cmd = subcommands()[name]
    argv = [*name.split(), *(a.format(tmp=tmp) for a in FAST_FAIL.get(name, required_args(cmd))),
            f"{flag}={value}"]
    if name not in FAST_FAIL:
        monkeypatch.setattr(decoderkit.cli, "build_parser", lambda: parser)
    return main(argv)


@pytest.mark.parametrize("name,flag", [(n, a.option_strings[0]) for n, a in numeric_flags()])
def test_bad_values_are_one_line_naming_the_flag(name, flag, capsys, monkeypatch, tmp_path):
    import torch

    threads = torch.get_num_threads()
    parser = build_parser()
    stubbed = subcommands(parser)[name]
    stubbed.set_defaults(run=lambda args: 0)  # used only for commands not in FAST_FAIL
    action = next(a for a in stubbed._actions if flag in a.option_strings)
    span = action.type
    try:
        for value in PROBES:
            status = run_probe(name, flag, value, parser, monkeypatch, tmp_path)
            captured = capsys.readouterr()
            assert "Traceback" not in captured.err, (flag, value, captured.err)
            try:
                span(value)
                accepted = True
            except argparse.ArgumentTypeError:
                accepted = False
            if accepted:  # then it fails later, on the missing input, still in one line
                assert status in (0, 2), (flag, value, status, captured.err)
            else:
                assert status == 2, (flag, value, captured.err)
                assert len(captured.err.strip().splitlines()) == 1, captured.err
                assert flag in captured.err and "expected" in captured.err, captured.err
                assert repr(value) in captured.err, captured.err
    finally:
        torch.set_num_threads(threads)
    assert not (tmp_path / "missing").exists()  # refused or failed: nothing was created


def test_each_probe_class_is_refused_somewhere():
    """The probes exercise every kind of refusal: not finite, wrong kind, below, above."""
    spans = [a.type for _, a in numeric_flags()]
    for value in ("nan", "inf", "0.5", "-1", "1e300"):
        assert any(_refused(s, value) for s in spans), value


def _refused(parse, value: str) -> bool:
    try:
        parse(value)
    except argparse.ArgumentTypeError:
        return True
    return False


@pytest.mark.parametrize("argv,flag", [
    (["train", "--task", "copy", "--clip", "-1"], "--clip"),
    (["translate", "--checkpoint", "x", "--length-penalty", "inf"], "--length-penalty"),
])
def test_through_a_real_process(argv, flag, tmp_path):
    done = subprocess.run([sys.executable, "-m", "decoderkit", *argv], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and flag in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# Every flag of every subcommand at commit 75f131b (before the family layout), each with a
# value then accepted and what it parsed to: {"argv", "dest", "value"}, made by parsing each
# argv with that commit's build_parser(). A flag renamed since must stay as an alias.
SNAPSHOT = Path(__file__).with_name("flags_75f131b.json")


def test_every_flag_of_75f131b_still_parses_to_the_same_value():
    rows = json.loads(SNAPSHOT.read_text())
    assert len(rows) > 200 and {r["argv"][0] for r in rows} >= {"train", "translate", "lm"}
    parser = build_parser()
    refused = []
    for row in rows:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                parsed = parser.parse_args(row["argv"])
        except SystemExit:
            refused.append(" ".join(row["argv"]))
            continue
        assert getattr(parsed, row["dest"]) == row["value"], row
    assert not refused, refused


def test_one_name_and_one_bound_per_setting_in_both_families():
    """train and lm train declare the shape and loop settings once: same option strings,
    same accepted range (and so the same [range] in --help)."""
    commands = subcommands()
    for flag in ("--layers", "--d-model", "--heads", "--d-ff", "--valid-every", "--eval-every",
                 "--batch-size", "--accum", "--max-steps", "--patience", "--seed", "--clip",
                 "--time-limit", "--threads", "--device"):
        seq2seq, lm = (commands[name]._option_string_actions[flag]
                       for name in ("train", "lm train"))
        assert seq2seq.option_strings == lm.option_strings, flag
        assert getattr(seq2seq.type, "span", None) == getattr(lm.type, "span", None), flag
    for flag in ("--temperature", "--top-k", "--top-p", "--seed"):  # sampling, both families
        assert commands["translate"]._option_string_actions[flag].type.span == \
            commands["lm sample"]._option_string_actions[flag].type.span, flag
    for flag, field in (("--layers", "n_layers"), ("--d-model", "d_model"),
                        ("--heads", "n_heads"), ("--d-ff", "d_ff")):  # the configs' own range
        for name in ("train", "params", "lm train"):
            action = commands[name]._option_string_actions[flag]
            assert action.type.span == MODEL_SIZES[field].span, (name, flag)
            assert f"[{MODEL_SIZES[field].span}]" in action.help, (name, flag)
