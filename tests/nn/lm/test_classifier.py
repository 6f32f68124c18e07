"""GPT-1's classifier: new embedding rows leave the LM unchanged, the input transformation,
the head reads the final state at the extract token (not elsewhere), padding is never read."""

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.classifier import (
    MAX_LABELS,
    ClassifierConfig,
    GPTClassifier,
    classifier_config,
    transform,
    with_new_tokens,
)
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig

V = 23


def small_lm(tie_head=True, norm_first=True, seed=0):
    torch.manual_seed(seed)
    return DecoderOnlyLM(LMConfig(vocab_size=V, n_layers=2, d_model=16, n_heads=4, d_ff=32,
                                  max_len=24, dropout=0.0, norm_first=norm_first,
                                  tie_head=tie_head)).double().eval()


@pytest.mark.parametrize("tie_head", [True, False])
def test_new_rows_leave_the_pretrained_model_unchanged(tie_head):
    lm = small_lm(tie_head)
    grown = with_new_tokens(lm, 3).eval()
    assert grown.config.vocab_size == V + 3 and lm.config.vocab_size == V
    ids = torch.randint(0, V, (2, 9))
    with torch.no_grad():
        assert torch.allclose(grown(ids)[..., :V], lm(ids), rtol=1e-12, atol=1e-12)
    new = grown.embed.lut.weight[V:]
    assert new.shape == (3, 16) and 0.005 < float(new.detach().std()) < 0.05  # N(0, 0.02^2)
    assert (grown.generator.proj.weight is grown.embed.lut.weight) == tie_head
    assert grown.embed.lut.weight.dtype == torch.float64


def test_transform_adds_start_delimiter_and_extract():
    config = classifier_config(small_lm(), ("no", "yes"))
    assert (config.start_id, config.delimiter_id, config.extract_id) == (V, V + 1, V + 2)
    assert transform(config, [4, 5]) == [V, 4, 5, V + 2]
    assert transform(config, [4], [6, 7]) == [V, 4, V + 1, 6, 7, V + 2]
    plain = ClassifierConfig(("a", "b"))
    assert transform(plain, [4, 5]) == [4, 5]  # HF's: the text as it is
    with pytest.raises(UsageError, match="no delimiter token"):
        transform(plain, [4], [5])


def test_config_refusals_name_the_field():
    for labels in (["one"], ["a", "a"], ["a", ""]):
        with pytest.raises(UsageError, match="labels must be at least 2 distinct"):
            ClassifierConfig(labels)
    with pytest.raises(UsageError, match="must differ"):
        ClassifierConfig(("a", "b"), 3, 3, 4)
    with pytest.raises(UsageError, match="dropout must be"):
        ClassifierConfig(("a", "b"), dropout=1.0)
    again = ClassifierConfig.from_dict(classifier_config(small_lm(), ("a", "b")).to_dict())
    assert again.labels == ("a", "b") and again.extract_id == V + 2 and again.pairs is None
    with pytest.raises(UsageError, match=r"^labels: 10,001 distinct labels; a classifier takes "
                       r"at most 10,000 \(MAX_LABELS\)$"):
        ClassifierConfig(tuple(map(str, range(MAX_LABELS + 1))))
    assert len(ClassifierConfig(tuple(map(str, range(MAX_LABELS)))).labels) == MAX_LABELS
    with pytest.raises(UsageError, match="pairs must be true, false or null, got 'yes'"):
        ClassifierConfig(("a", "b"), pairs="yes")
    pairs = classifier_config(small_lm(), ("a", "b"), pairs=True)
    assert ClassifierConfig.from_dict(pairs.to_dict()).takes_pairs is True
    assert ClassifierConfig(("a", "b"), pairs=True).takes_pairs is False  # no delimiter token


def test_head_reads_the_final_state_at_the_extract_token_and_ignores_padding():
    lm = with_new_tokens(small_lm(), 3)
    config = classifier_config(small_lm(), ("a", "b", "c"), dropout=0.0)
    model = GPTClassifier(lm, config).double().eval()
    row = transform(config, [3, 9, 1, 4])
    padded = torch.tensor([row + [V] * 3])  # right padding, any id
    with torch.no_grad():
        h = lm.features(torch.tensor([row]))[0]  # (T, d)
        want = h[-1] @ model.head.weight.T  # h_extract W_y, no bias
        got = model(padded, torch.tensor([len(row) - 1]))[0]
        elsewhere = model(padded, torch.tensor([len(row) - 2]))[0]
    assert model.head.bias is None and got.shape == (3,)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(elsewhere, want, atol=1e-6)


def test_a_config_whose_tokens_the_model_lacks_is_refused():
    with pytest.raises(UsageError, match="outside the model's vocabulary"):
        GPTClassifier(small_lm(), classifier_config(small_lm(), ("a", "b")))
