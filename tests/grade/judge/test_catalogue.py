"""Every catalogue mistake, planted into an otherwise correct solution, is the top diagnosis
for its item; correct solutions in several styles pass. Graded in-process (the planted code
is ours); the sandbox around it is tested in test_sandbox.py."""

import pytest
from grade.grade_helpers import FIXTURES, fixture_source, grade_source, plant

from decoderkit.grade import grader
from decoderkit.grade.judge.catalogue import BY_NAME, MISTAKES
from fixtures.grade.planted import PLANTS

ITEMS = {item.name: item for item in grader.ITEMS}


def test_catalogue_is_complete_and_explained():
    assert len(MISTAKES) >= 20
    assert len(BY_NAME) == len(MISTAKES)
    for m in MISTAKES:
        assert m.title and len(m.explanation) > 60 and m.formula and m.source
    planted = {p[0] for p in PLANTS}
    assert planted == set(BY_NAME), f"mistakes without a plant: {set(BY_NAME) - planted}"
    for item in grader.ITEMS:
        assert set(item.mistakes) <= set(BY_NAME)
    for mistake, _, item, *_ in PLANTS:
        assert mistake in ITEMS[item].mistakes, (mistake, item)


@pytest.mark.parametrize("fixture", ["correct_plain.py", "correct_annotated.py",
                                     "correct_mha.py", "correct_einsum.py", "correct_numpy.py"])
def test_correct_solutions_pass(fixture):
    report = grade_source(fixture_source(fixture), grader.ITEMS)
    found = [o for o in report.outcomes if o.status != "not found"]
    assert found, "the fixture defines no gradable item"
    assert all(o.status == "pass" for o in found), grader.format_report(report)
    assert report.passed


@pytest.mark.parametrize("mistake,file,item,old,new", PLANTS,
                         ids=[f"{p[2]}-{p[0]}" for p in PLANTS])
def test_planted_mistake_is_the_top_diagnosis(mistake, file, item, old, new):
    report = grade_source(plant(mistake, file, old, new), (ITEMS[item],))
    (outcome,) = report.outcomes
    assert outcome.status == "FAIL"
    assert outcome.diagnoses, f"no diagnosis; {outcome.detail}"
    assert outcome.diagnoses[0][0] == mistake, outcome.diagnoses
    assert not report.passed


def test_a_broken_component_fails_make_model():
    source = plant("relu_missing", "correct_annotated.py",
                   "self.w_2(self.dropout(self.w_1(x).relu()))",
                   "self.w_2(self.dropout(self.w_1(x)))")
    report = grade_source(source, (ITEMS["make_model"], ITEMS["PositionwiseFeedForward"]))
    assert [o.status for o in report.outcomes] == ["FAIL", "FAIL"]


def test_other_layouts_are_judged_by_black_box_properties():
    item = (ITEMS["DecoderBlock"],)
    source = fixture_source("correct_custom_layout.py")
    (outcome,) = grade_source(source, item).outcomes
    assert outcome.status == "pass" and "black-box properties" in outcome.notes[0]
    leaky = source.replace("self.att[0](x, x, mask)", "self.att[0](x, x)")  # mask ignored
    (outcome,) = grade_source(leaky, item).outcomes
    assert outcome.status == "FAIL" and outcome.detail.startswith("not causal")
    mixed = source.replace("return self.norms[2](x + self.ff(x))",
                           "return self.norms[2](x + self.ff(x)) + x.mean(0)")  # batch mixing
    (outcome,) = grade_source(mixed, item).outcomes
    assert outcome.status == "FAIL" and "batch rows are not independent" in outcome.detail
    pre_norm = source.replace("return self.norms[2](x + self.ff(x))",
                              "return x + self.ff(self.norms[2](x))")  # last sublayer pre-norm
    (outcome,) = grade_source(pre_norm, item).outcomes
    assert outcome.status == "FAIL" and "final LayerNorm" in outcome.detail, outcome.detail


TRANSFER = ("transform_input", "classification_head", "transfer_loss")  # correct_transfer.py's
LLAMA = ("apply_rope", "rms_norm", "swiglu", "repeat_kv",  # correct_llama.py's
         "lora_linear", "lora_merge", "lora_init")  # and correct_lora.py's


@pytest.mark.parametrize("fixture,missing", [
    ("correct_nanogpt.py", ("generate", "convert_gpt2_state_dict", "generate_cached",
                            *TRANSFER, *LLAMA)),
    ("correct_gpt_course.py", ("GPT.generate", *TRANSFER, *LLAMA))])
def test_week3_solutions_pass_exactly(fixture, missing):
    """nanoGPT's model.py (in its layout and names) and the course's layout pass every Week 3
    item they define, judged exactly (weights read, no black-box fallback)."""
    report = grade_source(fixture_source(fixture), grader.select("w3"))
    status = {o.item: o.status for o in report.outcomes}
    assert [status.pop(name) for name in missing] == ["not found"] * len(missing)
    assert set(status.values()) == {"pass"}, grader.format_report(report)
    assert not any(o.notes for o in report.outcomes)


def test_a_week3_file_is_judged_on_its_week3_items_only():
    """nanoGPT's model.py has its own LayerNorm(ndim, bias): with no --exercise it must not be
    judged as seed 001's LayerNorm(features, eps) (it failed with a TypeError there)."""
    report = grader.grade_file(FIXTURES / "correct_nanogpt.py")
    assert {o.seed for o in report.outcomes} == {"w3"}
    assert report.passed and report.scope.startswith("a Week 3 file"), grader.format_report(report)
    assert "only its Week 3 items are judged" in report.summary()
    assert report.to_json()["scope"] == report.scope
    everything = grader.grade_file(FIXTURES / "correct_nanogpt.py", "001")  # asked for: judged
    assert everything.scope is None and not everything.passed


def test_the_manual_lists_every_mistake():
    manual = (FIXTURES.parents[2] / "docs" / "grading.md").read_text()
    missing = [m.name for m in MISTAKES if f"| `{m.name}` | {m.title} |" not in manual]
    assert not missing, f"docs/grading.md's catalogue lacks {missing}"


def test_week3_transfer_solution_passes():
    """GPT-1's fine-tuning pieces, correct, pass; what it does not define is 'not found'."""
    report = grade_source(fixture_source("correct_transfer.py"), [ITEMS[n] for n in TRANSFER])
    assert [o.status for o in report.outcomes] == ["pass"] * 3, grader.format_report(report)
