"""Ranges: kinds, finiteness and both kinds of bound, with the message naming the field."""

import math
import re

import pytest

from decoderkit.base.checks import FRACTION, SEED, SEED_MAX, Range, check_fields, count
from decoderkit.base.errors import UsageError


@pytest.mark.parametrize("value,ok", [(1, True), (10**40, True), (0, False), (-3, False),
                                      (1.0, False), (True, False), ("2", False), (None, False)])
def test_counts_are_ints_at_least_their_low(value, ok):
    assert count().accepts(value) is ok


@pytest.mark.parametrize("value,ok", [(0, True), (0.0, True), (0.999, True), (1.0, False),
                                      (-1e-9, False), (math.nan, False), (math.inf, False),
                                      (False, False)])
def test_fractions_are_finite_and_half_open(value, ok):
    assert FRACTION.accepts(value) is ok


def test_open_and_closed_ends_and_spans():
    r = Range(False, 0, 1, low_open=True)
    assert not r.accepts(0) and r.accepts(1) and r.accepts(1e-300)
    assert r.span == "a finite number in (0, 1]"
    assert count(0).span == "an integer >= 0"
    assert Range(False, high=2, high_open=True).span == "a finite number < 2"
    assert SEED.accepts(SEED_MAX) and not SEED.accepts(SEED_MAX + 1)


def test_check_fields_names_the_field_and_allows_optional_none():
    class Config:
        batch = 0
        clip = None

    with pytest.raises(UsageError, match=r"batch must be an integer >= 1, got 0"):
        check_fields(Config(), {"batch": count()})
    check_fields(Config(), {"clip": count()}, optional=("clip",))
    with pytest.raises(UsageError, match="clip must be"):
        check_fields(Config(), {"clip": count()})


def test_check_choice_names_the_setting_the_choices_and_the_value():
    from decoderkit.base.checks import check_choice

    check_choice("activation", "relu", {"relu": None, "gelu": None})  # a dict: its keys
    for bad in ("swish", 1, ["relu"], None):
        with pytest.raises(UsageError, match=r"activation must be one of \('relu', 'gelu'\), "
                           f"got {re.escape(repr(bad))}$"):
            check_choice("activation", bad, {"relu": None, "gelu": None})
    with pytest.raises(UsageError):
        check_choice("flag", 1, (True, False))  # 1 == True, but not a bool


def test_check_bools_names_the_first_field_that_is_not_a_bool():
    import dataclasses

    from decoderkit.base.checks import check_bools

    @dataclasses.dataclass
    class Config:
        bias: object = True
        tie: object = False

    check_bools(Config(), ("bias", "tie"))
    with pytest.raises(UsageError, match="tie must be a bool, got 0"):
        check_bools(Config(tie=0), ("bias", "tie"))


def test_sizes_have_one_bound_and_a_step_one_more():
    from decoderkit.base.checks import MAX_COUNT, MAX_STEP_TOKENS, check_step_tokens, size

    assert size().accepts(MAX_COUNT) and not size().accepts(MAX_COUNT + 1)
    assert size(0).accepts(0) and not size().accepts(0)
    check_step_tokens(MAX_STEP_TOKENS // 64, 1, 64, "b x a x n")
    with pytest.raises(UsageError) as caught:
        check_step_tokens(MAX_STEP_TOKENS // 64, 2, 64, "b x a x n")
    assert str(caught.value).startswith(f"b x a x n = {MAX_STEP_TOKENS // 64} x 2 x 64 = ")


def test_rates_are_bounded_so_the_optimiser_update_stays_finite():
    from decoderkit.base.checks import RATE, WEIGHT

    assert RATE.accepts(10.0) and not RATE.accepts(1e308) and not RATE.accepts(0.0)
    assert WEIGHT.accepts(0.0) and not WEIGHT.accepts(11)
