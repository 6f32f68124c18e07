"""Judging one item's outputs: the normalised error (NaN only equals NaN), the first failing
case as the detail, the diagnoses (the mistakes whose variant reproduces every case), exact id
sequences with accepted alternatives."""

import math

import torch

from decoderkit.grade.judge.judging import (
    Case,
    TokenCase,
    Tolerance,
    error,
    judge,
    judge_tokens,
    token_list,
    value_problem,
    worst,
)

TOL = Tolerance(atol=1e-6, rtol=0.0)
NAN = math.nan


def test_error_counts_nan_as_equal_only_to_nan():
    got = torch.tensor([1.0, NAN, NAN, 2.0])
    expected = torch.tensor([1.0, NAN, 0.0, 2.5])
    assert error(got, expected, TOL).tolist() == [0.0, 0.0, math.inf, 0.5 / 1e-6]
    err, where = worst(got, expected, TOL)
    assert err == math.inf and where.startswith("max |diff| nan at [2] (yours nan, expected 0)")


def test_value_problem_names_type_shape_and_dtype():
    assert value_problem([1], (2,), None) == "returned list, expected a tensor of shape (2,)"
    assert value_problem({"__type__": "Foo"}, (2,), None) == ("returned Foo, expected a "
                                                             "tensor of shape (2,)")
    assert value_problem(torch.zeros(3), (2,), None) == "returned shape (3,), expected (2,)"
    assert value_problem(torch.zeros(2), (2,), torch.float64).startswith(
        "returned dtype torch.float32, expected torch.float64")
    assert value_problem(torch.zeros(2, dtype=torch.float64), (2,), torch.float64) is None


def _case(label, value, expected, variants=None, **result):
    return Case(label, {"value": value, **result}, expected,
                lambda m: (variants or {}).get(m, []))


def test_first_failing_case_and_the_reproducing_mistake():
    ref, doubled = torch.tensor([1.0, 2.0]), torch.tensor([2.0, 4.0])
    variants = {"doubled": [doubled], "negated": [-ref]}
    cases = [_case("a", ref.clone(), ref, variants), _case("b", doubled, ref, variants),
             _case("c", doubled, ref, variants)]
    outcome = judge("f", "000", cases, ("negated", "doubled"), TOL)
    assert outcome.status == "FAIL" and outcome.detail.startswith("b: max |diff| 2.00e+00 at [1]")
    assert outcome.diagnoses == []  # case a is right, and no mistake reproduces all three
    outcome = judge("f", "000", cases[1:], ("negated", "doubled"), TOL)
    assert outcome.diagnoses == [("doubled", 0.0)]


def test_a_modified_input_fails_even_when_the_value_is_right():
    ref = torch.tensor([1.0])
    outcome = judge("f", "000", [_case("a", ref, ref, mutated=["x"])], (), TOL)
    assert outcome.status == "FAIL" and "modified its input(s) ['x']" in outcome.detail
    assert judge("f", "000", [_case("a", ref, ref)], (), TOL).status == "pass"


def test_token_list_reads_lists_and_integral_tensors_only():
    assert token_list([1, 2.0, torch.tensor(3)]) == [1, 2, 3]
    assert token_list(torch.tensor([[4, 5]])) == [4, 5]
    assert token_list(torch.tensor([1.5])) is None
    assert token_list(torch.zeros(2, 2)) is None


def test_token_cases_accept_the_listed_answers_with_their_note():
    case = TokenCase("loop", {"value": [1, 3]}, [1, 3, 4], lambda m: {"drops": [1, 3]}[m],
                     accepted=(([1, 3], "both readings are accepted"),))
    outcome = judge_tokens("g", "004", [case], ("drops",))
    assert outcome.status == "pass" and outcome.notes == ["both readings are accepted"]
    wrong = TokenCase("loop", {"value": [1, 3]}, [1, 3, 4], lambda m: {"drops": [1, 3]}[m])
    outcome = judge_tokens("g", "004", [wrong], ("drops",))
    assert outcome.detail == "loop: returned [1, 3], expected [1, 3, 4]"
    assert outcome.diagnoses == [("drops", 0.0)]
