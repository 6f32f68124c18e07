"""GPT2ForSequenceClassification out and in: transformers' own model gives our logits on
inputs built by the input transformation (padded batches included), a round trip keeps the
extract token, a foreign directory opens with HF's last-token pooling."""

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.gpt.classifier import export_classifier, load_hf_classifier
from decoderkit.nn.lm.classifier import GPTClassifier, classifier_config, transform, with_new_tokens
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.training.lm.labelled import make_batch

transformers = pytest.importorskip("transformers")

V = 40
TEXTS = [[5, 17, 3, 22, 8], [1, 2], [30, 31, 32, 33, 34, 35, 36, 9]]


def classifier(tie_head=True):
    torch.manual_seed(0)
    lm = DecoderOnlyLM(LMConfig(vocab_size=V, n_layers=2, d_model=16, n_heads=4, d_ff=40,
                                max_len=32, dropout=0.0, tie_head=tie_head))
    config = classifier_config(lm, ("comedy", "history", "tragedy"), dropout=0.0)
    model = GPTClassifier(with_new_tokens(lm, 3), config).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # LayerNorms and biases off their init: every tensor matters
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return model.eval()


@pytest.mark.parametrize("tie_head", [True, False])
def test_transformers_gives_our_logits_on_a_padded_batch(tmp_path, tie_head):
    model = classifier(tie_head)
    export_classifier(model, None, tmp_path / "hf")
    hf = transformers.GPT2ForSequenceClassification.from_pretrained(
        tmp_path / "hf", dtype=torch.float64).eval()
    assert hf.config.id2label == {0: "comedy", 1: "history", 2: "tragedy"}
    batch = make_batch([transform(model.config, t) for t in TEXTS], [0] * 3,
                       model.config.start_id)  # right-padded with the start token
    with torch.no_grad():
        ours = model(batch.ids, batch.at)
        theirs = hf(batch.ids).logits
    assert batch.ids.size(1) > len(transform(model.config, TEXTS[1]))  # row 1 is padded
    assert float((ours - theirs).abs().max()) <= 1e-12


def test_round_trip_keeps_the_extract_token(tmp_path):
    model = classifier()
    export_classifier(model, None, tmp_path / "hf")
    again, tokenizer = load_hf_classifier(tmp_path / "hf")
    assert tokenizer is None and again.config == model.config
    batch = make_batch([transform(model.config, t) for t in TEXTS], [0] * 3,
                       model.config.start_id)
    with torch.no_grad():
        assert torch.equal(again(batch.ids, batch.at), model(batch.ids, batch.at))
    with pytest.raises(UsageError, match="replace only an earlier export|exists"):
        export_classifier(model, None, tmp_path / "hf")


def test_a_foreign_directory_pools_the_last_token_as_hf_does(tmp_path):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=16, n_layer=2,
                                     n_head=4, num_labels=2)
    hf = transformers.GPT2ForSequenceClassification(config).double().eval()
    hf.save_pretrained(tmp_path / "foreign")
    ours, _ = load_hf_classifier(tmp_path / "foreign")
    assert not ours.config.transformed and ours.config.labels == ("LABEL_0", "LABEL_1")
    ids = torch.tensor([TEXTS[0]])
    with torch.no_grad():
        want = hf(ids).logits
        got = ours(torch.tensor([transform(ours.config, TEXTS[0])]), torch.tensor([4]))
    assert float((got - want).abs().max()) <= 1e-12


def test_an_lm_directory_is_not_a_classifier(tmp_path):
    transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=V, n_positions=32, n_embd=16, n_layer=1, n_head=4)).save_pretrained(tmp_path)
    with pytest.raises(UsageError, match="not a GPT2ForSequenceClassification"):
        load_hf_classifier(tmp_path)


def test_a_config_of_more_labels_than_a_classifier_takes_is_refused_first(tmp_path):
    import json

    config = transformers.GPT2Config(vocab_size=V, n_positions=32, n_embd=16, n_layer=1,
                                     n_head=4, num_labels=2)
    transformers.GPT2ForSequenceClassification(config).save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw.pop("id2label", None), raw.pop("label2id", None)
    (tmp_path / "config.json").write_text(json.dumps(raw | {"num_labels": 10**9}))
    with pytest.raises(UsageError, match=r"config.json: id2label/num_labels: 1,000,000,000 "
                       r"distinct labels; a classifier takes at most 10,000 \(MAX_LABELS\)$"):
        load_hf_classifier(tmp_path)
