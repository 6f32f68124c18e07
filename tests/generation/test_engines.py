"""One table of what each engine lacks and one check: every option of the table can be asked
for, each refusal names the option, the engine and why, decoderkit's engine lacks nothing."""

from __future__ import annotations

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.base.families import LM, SEQ2SEQ
from decoderkit.generation.engines import UNAVAILABLE, check_engine, unavailable
from decoderkit.generation.lm import row
from decoderkit.generation.seq2seq import translate
from decoderkit.generation.seq2seq.translate import DecodeOptions


@pytest.mark.parametrize("family,engine,option,why", [
    (family, engine, option, why) for family, engines in UNAVAILABLE.items()
    for engine, lacks in engines.items() for option, why in lacks.items()])
def test_each_option_an_engine_lacks_is_refused_naming_it_and_why(family, engine, option, why):
    for name in (engine, f"{engine} int8"):
        with pytest.raises(UsageError) as refused:
            check_engine(family, name, ["something else", option])
        assert str(refused.value) == f"{option} is not available with engine {name}: {why}"
    check_engine(family, engine, [o for o in ("beam", "top_k") if o != option])  # others pass
    check_engine(family, "decoderkit", [option])  # ours gives everything
    assert unavailable(family, "decoderkit") == {}


def test_the_refusal_is_the_callers_error_for_its_field():
    class Field(UsageError):
        def __init__(self, field, message):
            super().__init__(message)
            self.field = field

    with pytest.raises(Field) as refused:
        check_engine(SEQ2SEQ, "ctranslate2", ["explain"], Field)
    assert refused.value.field == "explain"


def test_every_option_of_the_table_is_one_a_call_can_ask_for():
    """A row of the table that no DecodeOptions or Settings could ask would be dead."""
    seq2seq = {o for lacks in UNAVAILABLE[SEQ2SEQ].values() for o in lacks}
    assert seq2seq == set(translate.ASKS)
    everything = DecodeOptions(sample=True, explain=1, compile=True, int8=True)
    assert set(translate.asked(everything)) == seq2seq - {"n_best"}
    assert translate.asked(DecodeOptions(beam=2, n_best=2)) == ["n_best"]
    assert translate.asked(DecodeOptions()) == []
    lm = {o for lacks in UNAVAILABLE[LM].values() for o in lacks}
    settings = row.Settings(4, seed=1, presence_penalty=0.5, frequency_penalty=0.5,
                            logit_bias=((1, 1.0),), logprobs=2)
    assert set(row.asked(settings)) == lm - {"explore"}  # explore: a route, not a setting
    assert row.asked(row.Settings(4)) == []
