"""Week 3's Llama items: a correct solution passes; RoPE's offset property is checked on the
learner's own function (a rotation that has it but is not the one asked for is told so, a
function without it fails saying so). The named mistakes are planted in test_catalogue.py."""

from grade.grade_helpers import fixture_source, grade_source, plant

from decoderkit.grade import grader

LLAMA = ("apply_rope", "rms_norm", "swiglu", "repeat_kv")


def test_the_correct_solution_passes_every_llama_item():
    report = grade_source(fixture_source("correct_llama.py"), grader.select("w3"))
    status = {o.item: o.status for o in report.outcomes if o.status != "not found"}
    assert status == dict.fromkeys(LLAMA, "pass"), grader.format_report(report)


def _rope(old: str, new: str):
    items = [i for i in grader.select("w3") if i.name == "apply_rope"]
    (outcome,) = grade_source(plant("rope", "correct_llama.py", old, new), items).outcomes
    return outcome


def test_an_absolute_position_term_breaks_the_offset_property():
    outcome = _rope("return (x * emb.cos()", "return (x * (1 + positions[:, None]) * emb.cos()")
    assert outcome.status == "FAIL" and not outcome.diagnoses
    assert any("depends on the offset alone" in n for n in outcome.notes), outcome.notes


def test_another_rotation_keeps_the_property_and_is_told_so():
    outcome = _rope("torch.cat((-x2, x1), dim=-1)", "torch.cat((x2, -x1), dim=-1)")
    assert outcome.status == "FAIL" and outcome.diagnoses[0][0] == "rope_rotation_reversed"
    assert any("function of the offset alone" in n for n in outcome.notes), outcome.notes
