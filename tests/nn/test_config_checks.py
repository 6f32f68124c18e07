"""nn.config_checks: both model configs refuse a bad shared setting with the same line (one
rule, stated once), and MultiHeadAttention refuses bad heads as the configs do."""

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.nn.lm.model import LMConfig

SHAPE = dict(n_layers=1, d_model=8, n_heads=2, d_ff=16, max_len=32)


def refusal(build) -> str:
    with pytest.raises(UsageError) as caught:
        build()
    return str(caught.value)


@pytest.mark.parametrize("change", [
    dict(n_heads=3), dict(d_model=0), dict(n_layers=10**6), dict(d_ff=-1), dict(dropout=1.0),
    dict(dropout=float("nan")), dict(norm_first=1), dict(bias="yes"), dict(activation="tanh"),
    dict(scale_embeddings=None), dict(d_model=9, n_heads=3)])  # odd: both sinusoidal here
def test_both_families_refuse_a_shared_setting_with_the_same_line(change):
    seq2seq = refusal(lambda: ModelConfig(5, 5, **SHAPE | change))
    lm = refusal(lambda: LMConfig(5, **SHAPE | change, positions="sinusoidal"))
    assert seq2seq == lm


def test_both_families_name_their_sizes_when_over_the_parameter_budget():
    huge = SHAPE | dict(d_model=2**16, n_heads=1, d_ff=2**18, n_layers=512)
    seq2seq = refusal(lambda: ModelConfig(5, 5, **huge))
    lm = refusal(lambda: LMConfig(5, **huge))
    for line, vocab in ((seq2seq, "src_vocab=5, tgt_vocab=5"), (lm, "vocab_size=5")):
        assert line.startswith(f"{vocab}, n_layers=512, d_model=65536, n_heads=1, "
                               "d_ff=262144, max_len=32 gives a model of about "), line


def test_attention_refuses_heads_as_the_configs_do():
    assert refusal(lambda: MultiHeadAttention(10, 4)) == \
        refusal(lambda: LMConfig(5, **SHAPE | dict(d_model=10, n_heads=4)))
