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
    "lm chat": ["--checkpoint", MISSING],
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
        monkeypatch.setattr(decoderkit.cli, "build_parser", lambda command=None: parser)
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


def string_flags() -> list[tuple[str, argparse.Action]]:
    """Every flag or positional of every subcommand that takes a string (no choices, no
    number), bench's pass-through arguments aside."""
    return [(name, a) for name, cmd in subcommands().items() for a in cmd._actions
            if isinstance(a, (argparse._StoreAction, argparse._AppendAction))
            and a.choices is None and getattr(a.type, "span", None) is None
            and a.nargs != argparse.REMAINDER]


def test_every_string_argument_is_text_or_a_path():
    """A text (prompt, sentence, token) must be UTF-8; a path may hold any bytes but not be
    empty: each string argument says which it is, so a new flag cannot skip both checks."""
    from decoderkit.cli.args import pathname, text

    found = string_flags()
    assert len(found) >= 40
    untyped = [(n, a.option_strings or a.dest) for n, a in found if a.type not in (text, pathname)]
    assert not untyped, untyped


@pytest.mark.parametrize("name,key", [(n, (a.option_strings or [a.dest])[0])
                                      for n, a in string_flags()])
def test_a_byte_that_is_not_utf8_or_an_empty_path_is_one_line_naming_the_flag(
        name, key, capsys):
    from decoderkit.cli.args import text

    cmd = subcommands()[name]
    action = next(a for a in cmd._actions if (a.option_strings or [a.dest])[0] == key)
    value = "ab\udcff" if action.type is text else ""
    argv = [*name.split(), f"{key}={value}" if action.option_strings else value]  # refused
    # as it is read, before argparse looks for the required arguments
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    expected = ("expected UTF-8 text, got b'ab\\xff' (byte 0xff, not UTF-8, at character 3)"
                if action.type is text else "expected a path, got ''")
    shown = key if action.option_strings else action.metavar or action.dest
    assert f"argument {shown}: {expected}" in err, err


# Integer flags that count steps or validations, not things held in memory: no upper bound
# (a long run is the user's choice); any other integer flag is a size, bounded.
UNBOUNDED = {"--max-steps", "--warmup", "--valid-every", "--patience", "--epochs"}


def test_every_size_flag_has_an_upper_bound():
    open_ended = sorted({(n, a.option_strings[0]) for n, a in numeric_flags()
                         if a.type.__name__ == "integer" and a.option_strings
                         and " in [" not in a.type.span
                         and a.option_strings[0] not in UNBOUNDED})
    assert not open_ended, open_ended


@pytest.mark.parametrize("command,ranges", [
    ("train", "decoderkit.training.seq2seq.fit:TRAIN_RANGES"),
    ("train", "decoderkit.training.seq2seq.prepare:DATA_RANGES"),
    ("lm train", "decoderkit.training.lm.fit:LM_TRAIN_RANGES"),
    ("lm finetune", "decoderkit.training.lm.finetune:FINETUNE_RANGES")])
def test_help_ranges_are_what_the_config_accepts(command, ranges):
    """A flag that sets a config field states and checks that field's own Range, so a value
    inside the advertised range is never refused later by the config."""
    import importlib

    module, name = ranges.split(":")
    fields = getattr(importlib.import_module(module), name)
    checked = 0
    for action in subcommands()[command]._actions:
        if action.dest in fields and getattr(action.type, "span", None) \
                and action.dest != "clip":  # --clip 0 is the config's None (no clipping)
            assert action.type.span == fields[action.dest].span, (command, action.dest)
            assert f"[{fields[action.dest].span}]" in action.help
            checked += 1
    assert checked >= 4


@pytest.mark.parametrize("argv,expected", [
    (["lm", "train", "--text", "t", "--out", "o", "--lr", "1e308"],
     "argument --lr: expected a finite number in (0.0, 10.0], got '1e308'"),
    (["lm", "train", "--text", "t", "--out", "o", "--batch-size", "100000000"],
     "argument --batch-size: expected an integer in [1, 1048576], got '100000000'"),
    (["train", "--task", "copy", "--accum", "100000000"],
     "argument --accum: expected an integer in [1, 1048576], got '100000000'"),
    (["lm", "train", "--text", "t", "--out", "o", "--batch-size", "1000000", "--accum", "100"],
     "decoderkit lm train: error: --batch-size x --accum x --max-len = 1000000 x 100 x 64 = "
     "6,400,000,000 positions a step, more than the 16,777,216 a step may hold: lower one"),
    (["train", "--task", "copy", "--batch-size", "65536", "--max-len", "512"],
     "decoderkit train: error: --batch-size x --accum x --max-len = 65536 x 1 x 512 = "),
])
def test_sizes_and_rates_past_their_bound_are_refused_before_any_work(argv, expected, capsys,
                                                                      tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err
    assert list(tmp_path.iterdir()) == []


def test_max_len_and_block_size_are_one_setting_in_both_training_commands():
    commands = subcommands()
    for name, dest in (("train", "max_len"), ("lm train", "block_size")):
        action = commands[name]._option_string_actions["--max-len"]
        assert action is commands[name]._option_string_actions["--block-size"]
        assert action.dest == dest and action.option_strings == ["--max-len", "--block-size"]
        assert build_parser().parse_args(
            [*name.split(), "--block-size", "32", *(["--task", "x"] if name == "train" else
                                                    ["--text", "t", "--out", "o"])]
        ).__dict__[dest] == 32
