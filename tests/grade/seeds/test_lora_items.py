"""Week 3's LoRA items: a correct solution passes all three (the named mistakes are planted in
test_catalogue.py); an in-place merge, and a base left trainable, are named even where the
value is right."""

from grade.grade_helpers import fixture_source, grade_source, plant

from decoderkit.grade import grader

LORA = ("lora_linear", "lora_merge", "lora_init")


def test_the_correct_solution_passes_every_lora_item():
    report = grade_source(fixture_source("correct_lora.py"), grader.select("w3"))
    status = {o.item: o.status for o in report.outcomes if o.status != "not found"}
    assert status == dict.fromkeys(LORA, "pass"), grader.format_report(report)


def test_a_merge_in_place_fails_naming_the_second_merge():
    items = [i for i in grader.select("w3") if i.name == "lora_merge"]
    source = plant("lora", "correct_lora.py", "    return weight + scale * lora_B @ lora_A",
                   "    weight += scale * lora_B @ lora_A\n    return weight")
    (outcome,) = grade_source(source, items).outcomes
    assert outcome.status == "FAIL" and "modified its input" in outcome.detail
    assert outcome.diagnoses[0][0] == "lora_merged_twice"


def test_a_base_left_trainable_fails_naming_it():
    """The value is right, but a gradient reaches the base: weight and bias (nothing
    detached), or the bias alone."""
    items = [i for i in grader.select("w3") if i.name == "lora_linear"]
    for old, new, named in (("weight.detach().T + bias.detach()", "weight.T + bias",
                             "weight and bias"),
                            ("bias.detach() + scale", "bias + scale", "bias: it is left")):
        source = plant("lora", "correct_lora.py", old, new)
        (outcome,) = grade_source(source, items).outcomes
        assert outcome.status == "FAIL" and f"the base's {named}" in outcome.detail, outcome
        assert outcome.diagnoses[0][0] == "lora_base_trainable"
