"""``--resume`` with only what changes: each flag the command line leaves out is taken from the
run's own command lines (recorded in its checkpoints, oldest first), so ``decoderkit train
--data X --resume --out DIR`` goes on as the run was started. What is filled in still goes
through every resume check (``training.resume``): a value that differs is refused, never used.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.cli import build_parser
from decoderkit.training.distributed import say
from decoderkit.training.checkpoint_dir import META, read_meta, resolve

# taken from this command line alone: whether and how this invocation resumes, and where
NOT_FILLED = ("resume", "overwrite", "allow_changed_data", "out")


def on_resume(args: argparse.Namespace, out: str | Path, command: str
              ) -> tuple[argparse.Namespace, list[list[str]] | None]:
    """(``args`` filled in from the run in ``out`` when they ``--resume`` it, the command
    lines to keep with the run): what every training command (``command``: "decoderkit
    train") calls before reading a flag; an ``out`` holding another model is refused first."""
    check_run(out, command)
    commands = recorded(out) if args.resume else None
    return resumed(args, commands), record(args, commands)


def check_run(out: str | Path, command: str) -> None:
    """Refuse an ``out`` that holds a model other than a run of ``command`` (another
    family's run, an export, a Hugging Face directory), naming what it is and the command
    that fits, before anything in it is read."""
    from decoderkit.base.families import SEQ2SEQ
    from decoderkit.interop.checkpoints import identify

    found = identify(out)
    if found is None or found.trains == command:
        return
    if found.trains:
        fits = f" (resume it with `{found.trains} --resume --out {out}`)"
    elif found.family == SEQ2SEQ and found.engine is None:
        fits = f" (`{found.use} {out}` takes it; `decoderkit convert` makes a run of it)"
    else:
        fits = f" (`{found.use} {out}` takes it)" if found.use else ""
    raise UsageError(f"--out {out} is {found}, not a run of `{command}`: choose another "
                     f"--out{fits}")


def recorded(out: str | Path) -> list[list[str]] | None:
    """The command lines kept in the checkpoint in ``out`` (None: no checkpoint there, which
    the run directory's check names, or a run without a record)."""
    path = resolve(Path(out))
    if path is None:
        return None
    commands = read_meta(path).get("commands")
    if commands is not None and not (isinstance(commands, list) and commands and all(
            isinstance(c, list) and c and all(isinstance(w, str) for w in c) for c in commands)):
        raise UsageError(f"{path / META}: 'commands' must be a list of command lines (lists "
                         f"of strings), got {str(commands)[:80]}")
    return commands


def given(words: list[str]) -> dict[str, object]:
    """{dest: value} of the options that ``words`` (a decoderkit command line) sets itself,
    not by default: parsed again with every default suppressed."""
    parser = build_parser(words[0])
    options = _suppress(parser)
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(out):
            parsed = parser.parse_args(words)
    except SystemExit:
        raise UsageError(f"the command line {' '.join(words)!r} does not parse here "
                         f"({out.getvalue().strip()})") from None
    return {k: v for k, v in vars(parsed).items() if k in options}


def _suppress(parser: argparse.ArgumentParser) -> set[str]:
    """Suppress every option's default in ``parser`` and its subcommands; their dests."""
    dests = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                dests |= _suppress(sub)
        elif action.option_strings:
            action.default = argparse.SUPPRESS
            dests.add(action.dest)
    return dests


def resumed(args: argparse.Namespace, commands: list[list[str]] | None) -> argparse.Namespace:
    """``args`` (parsed from ``args.words``) with each option it leaves out set as the run's
    ``commands`` set it, a later one over an earlier one; unchanged when the run has no
    record (a run of an older release: the resume checks then name what differs)."""
    if not commands:
        return args
    try:  # a command line of an older release may name a flag this one lacks
        saved = [given(words) for words in commands]
    except UsageError as err:
        say(f"note: {err}: the flags left out are not filled in from the run")
        return args
    now = given(args.words)
    filled = vars(args).copy()
    for flags in saved:
        filled.update((k, v) for k, v in flags.items() if k not in now and k not in NOT_FILLED)
    return argparse.Namespace(**filled)


def record(args: argparse.Namespace, commands: list[list[str]] | None) -> list[list[str]]:
    """The command lines to keep with the run: the run's own (``commands``), then this one. A
    resumed run without a record passed the resume checks with this command line's flags, so
    it alone describes the run from here on."""
    return [*(commands or []), list(args.words)]
