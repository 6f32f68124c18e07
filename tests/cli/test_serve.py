"""``decoderkit serve``'s limit flags are the servers' limits dataclasses: one flag per field,
named as it, with its range, and the family's own default when not given."""

from __future__ import annotations

from dataclasses import fields

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.base.families import LM, SAID, SEQ2SEQ
from decoderkit.cli import build_parser, main
from decoderkit.cli.serve import LIMIT_HELP, LIMITS, SIZED, limits_of
from decoderkit.serve.lm.limits import LMLimits
from decoderkit.serve.seq2seq.limits import ServeLimits


def serve_flags():
    parser = build_parser("serve")
    return next(a for a in parser._actions if a.choices and "serve" in a.choices).choices["serve"]


@pytest.mark.parametrize("family,cls", [(SEQ2SEQ, ServeLimits), (LM, LMLimits)])
def test_each_flag_default_is_the_dataclass_field_default(family, cls):
    args = build_parser("serve").parse_args(["serve"])
    assert limits_of(args, family) == cls()
    names = {f.name for f in fields(cls)}
    assert names <= set(LIMIT_HELP) and set(LIMITS[family][1]) == names
    actions = serve_flags()._option_string_actions
    for f in fields(cls):
        action = actions[f"--{f.name.replace('_', '-')}"]
        assert action.dest == f.name and action.default is None
        assert action.type.span == LIMITS[family][1][f.name].span, f.name
        shown = SIZED.get(f.name, "the model's max_len") if f.default is None else str(f.default)
        assert f"default {shown}" in action.help or f"{SAID[family]} {shown}" in action.help, \
            (f.name, action.help)


def test_a_field_of_both_families_takes_one_range():
    (_, seq2seq), (_, lm) = LIMITS.values()
    shared = set(seq2seq) & set(lm)
    assert shared >= {"max_batch", "max_queue", "max_work_tokens", "max_inputs", "max_len"}
    assert all(seq2seq[name] == lm[name] for name in shared)


def test_a_flag_fills_its_field_in_either_family():
    args = build_parser("serve").parse_args(["serve", "--max-batch", "3", "--max-work-tokens",
                                             "900", "--max-len", "7", "--max-inputs", "2"])
    for family, cls in ((SEQ2SEQ, ServeLimits), (LM, LMLimits)):
        assert limits_of(args, family) == cls(max_batch=3, max_work_tokens=900, max_len=7,
                                              max_inputs=2)


def test_the_old_max_tokens_flag_still_fills_the_work_budget_with_a_warning(capsys):
    """--max-tokens was the work budget's flag beside OpenAI's max_tokens (a request's new
    tokens): renamed --max-work-tokens, the old one parses, warns and is said deprecated."""
    parser = build_parser("serve")
    args = parser.parse_args(["serve", "--max-tokens", "900"])
    assert limits_of(args, LM) == LMLimits(max_work_tokens=900)
    assert "--max-tokens is deprecated, use --max-work-tokens" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--help"])
    assert "deprecated: --max-work-tokens" in " ".join(capsys.readouterr().out.split())
    both = parser.parse_args(["serve", "--max-tokens", "9", "--max-work-tokens", "9"])
    with pytest.raises(UsageError, match="give one of them"):
        limits_of(both, SEQ2SEQ)


@pytest.mark.parametrize("argv,family,message", [
    (["--max-beam", "4"], LM, "--max-beam applies to translation checkpoints, not the LM"),
    (["--max-wait-ms", "9"], LM, "--max-wait-ms applies to translation checkpoints"),
    (["--max-n", "4"], SEQ2SEQ, "--max-n applies to LM checkpoints, not the translation"),
])
def test_a_flag_of_the_other_family_is_refused_naming_it(argv, family, message):
    args = build_parser("serve").parse_args(["serve", "--checkpoint", "x", *argv])
    with pytest.raises(UsageError, match=message):
        limits_of(args, family)


def test_help_states_each_familys_status_codes(capsys):
    assert main(["serve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "a refused request gets 422 (503 when the queue is full)" in text
    assert "a refused request gets 400 (429 when the queue is full)" in text
    assert "(LM: 400 beyond)" in text and "(LM: beyond, 429)" in text


@pytest.mark.parametrize("argv,mb", [
    ([], 1024), (["--prefix-cache-mb", "64"], 64), (["--no-prefix-reuse"], None),
    (["--compile"], None)])
def test_the_prefix_flags_give_the_stores_budget(argv, mb):
    from decoderkit.cli.engines import prefix_cache_mb

    assert prefix_cache_mb(build_parser("serve").parse_args(["serve", *argv])) == mb


@pytest.mark.parametrize("argv,message", [
    (["--prefix-cache-mb", "8", "--no-prefix-reuse"], "--prefix-cache-mb 8 with "
     "--no-prefix-reuse: prefix reuse is off"),
    (["--prefix-cache-mb", "8", "--compile"], "--prefix-cache-mb 8 with --compile")])
def test_a_budget_beside_reuse_off_is_refused(argv, message):
    from decoderkit.cli.engines import prefix_cache_mb

    with pytest.raises(UsageError, match=message):
        prefix_cache_mb(build_parser("serve").parse_args(["serve", *argv]))


def test_the_budgets_range_is_the_librarys(capsys):
    from decoderkit.base.checks import PREFIX_CACHE_MB

    action = serve_flags()._option_string_actions["--prefix-cache-mb"]
    assert action.type.span == PREFIX_CACHE_MB.span == "an integer in [1, 1048576]"
    with pytest.raises(SystemExit):
        build_parser("serve").parse_args(["serve", "--prefix-cache-mb", "0"])
    assert "expected an integer in [1, 1048576], got '0'" in capsys.readouterr().err
