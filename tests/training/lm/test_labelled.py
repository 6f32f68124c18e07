"""Labelled TSV data: reading and its refusals, encoding with the input transformation and
the context cut, epoch batches, macro-F1 against scikit-learn's."""

import re

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.classifier import ClassifierConfig
from decoderkit.training.lm.labelled import (
    Labelled,
    encode,
    epoch_batch,
    label_ids,
    macro_f1,
    make_batch,
    read_tsv,
    unlabelled,
)
from decoderkit.text.lm.tokenizer import LMTokenizer

TOKENIZER = LMTokenizer.characters("abcdefgh ")
CONFIG = ClassifierConfig(("x", "y"), 9, 10, 11)


def test_read_tsv_single_and_pairs(tmp_path):
    (tmp_path / "one.tsv").write_text("ab cd\tx\n\nef\ty\n", encoding="utf-8")
    (tmp_path / "two.tsv").write_text("ab\tcd\tx\n", encoding="utf-8")
    one, two = read_tsv(tmp_path / "one.tsv"), read_tsv(tmp_path / "two.tsv")
    assert one.texts == [("ab cd",), ("ef",)] and one.labels == ["x", "y"] and not one.pairs
    assert two.texts == [("ab", "cd")] and two.pairs
    assert label_ids(one, ("y", "x")) == [1, 0]
    with pytest.raises(UsageError, match=r"one.tsv: label\(s\) \['y'\] not among"):
        label_ids(one, ("x", "z"))


@pytest.mark.parametrize("text, message", [
    ("ab\tx\nab\tcd\tx\n", "two.tsv:2: 3 tab-separated fields, expected 2"),
    ("ab\n", "two.tsv:1: 1 tab-separated fields, expected 2 or 3"),
    ("ab\t \n", "two.tsv:1: an empty label"),
    ("\tx\n", "two.tsv:1: an empty text"),
    ("ab\t\tx\n", "two.tsv:1: an empty text"),
    ("\n\n", "two.tsv: no examples"),
])
def test_read_tsv_refusals_name_the_line(tmp_path, text, message):
    (tmp_path / "two.tsv").write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=message):
        read_tsv(tmp_path / "two.tsv")


def test_encode_transforms_and_cuts_the_longer_text_from_the_end(tmp_path):
    (tmp_path / "d.tsv").write_text("abcdefgh\tab\tx\nab\tcd\ty\n", encoding="utf-8")
    data = read_tsv(tmp_path / "d.tsv")
    examples = encode(data, TOKENIZER, CONFIG, max_len=8, targets=[0, 1])
    a, b = TOKENIZER.encode("abc"), TOKENIZER.encode("ab")
    assert examples.ids[0] == [9, *a, 10, *b, 11]  # 8 = 3 new + 3 + 2: the longer one cut
    assert examples.ids[1] == [9, *TOKENIZER.encode("ab"), 10, *TOKENIZER.encode("cd"), 11]
    assert examples.cut == 1 and examples.targets == [0, 1]
    (tmp_path / "e.tsv").write_text("abz\tx\n", encoding="utf-8")
    with pytest.raises(UsageError, match="e.tsv: example 1: 1 character"):
        encode(read_tsv(tmp_path / "e.tsv"), TOKENIZER, CONFIG, max_len=8)


def test_batches_pad_right_and_cover_each_epoch_once():
    rows = [[9, 1, 11], [9, 1, 2, 3, 11], [9, 11]]
    b = make_batch(rows, [0, 1, 0], pad_id=9)
    assert b.ids.tolist() == [[9, 1, 11, 9, 9], [9, 1, 2, 3, 11], [9, 11, 9, 9, 9]]
    assert b.at.tolist() == [2, 4, 1] and b.n_tokens == 3
    assert b.lm_mask.tolist() == [[True, True, False, False], [True] * 4,
                                  [True, False, False, False]]
    from decoderkit.training.lm.labelled import Examples

    examples = Examples([[9, i, 11] for i in range(7)], list(range(7)), 0)
    for epoch in range(2):
        seen = [t for k in range(3) for t in epoch_batch(examples, 3, 5, 3 * epoch + k,
                                                         9).targets.tolist()]
        assert sorted(seen) == list(range(7))  # batches of 3, 3, 1: each example once
    first = epoch_batch(examples, 3, 5, 0, 9).targets.tolist()
    assert first == epoch_batch(examples, 3, 5, 0, 9).targets.tolist()  # a function of index
    assert first != epoch_batch(examples, 3, 5, 3, 9).targets.tolist()  # epochs reshuffle


def test_macro_f1_equals_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    g = torch.Generator().manual_seed(0)
    for classes in (2, 3, 5):
        targets = torch.randint(classes, (60,), generator=g).tolist()
        predicted = torch.randint(classes, (60,), generator=g).tolist()
        predicted[:5] = [0] * 5
        want = metrics.f1_score(targets, predicted, average="macro",
                                labels=list(range(classes)), zero_division=0)
        assert macro_f1(predicted, targets, classes) == pytest.approx(want, abs=1e-12)
    assert macro_f1([0, 0], [0, 0], 3) == pytest.approx(1 / 3)  # absent classes score 0


@pytest.mark.parametrize("lines, message", [
    ([""], "TEXT: example 1: an empty text"),
    (["ab", "\t"], "TEXT: example 2: an empty text"),
    (["ab", " "], "TEXT: example 2: an empty text"),
    (["a\tb\tc"], "TEXT: example 1: 3 tab-separated texts, expected 1"),
    (["ab", "a\tb"], "TEXT: example 2 is 2 text(s), example 1 1: give every example as one"),
    ([], "TEXT: no examples"),
])
def test_texts_to_classify_hold_to_the_tsv_rules(lines, message):
    with pytest.raises(UsageError) as caught:
        unlabelled(lines, "TEXT")
    assert str(caught.value).startswith(message), caught.value
    with pytest.raises(UsageError):  # the library's own way in: the same rules
        Labelled([tuple(x.split("\t")) for x in lines], [], "TEXT")


@pytest.mark.parametrize("pairs", [False, True])
def test_examples_of_another_input_than_the_classifiers_are_refused(pairs):
    config = ClassifierConfig(("x", "y"), 9, 10, 11, pairs=pairs)
    other = unlabelled(["ab" if pairs else "ab\tcd"], "x.tsv")
    given = "single texts" if pairs else "pairs of texts (text TAB text)"
    with pytest.raises(UsageError, match=rf"^x.tsv: {re.escape(given)}, but the classifier "
                       "takes"):
        encode(other, TOKENIZER, config, 16)
    same = unlabelled(["ab\tcd" if pairs else "ab"], "x.tsv")
    assert encode(same, TOKENIZER, config, 16).ids
    hf = ClassifierConfig(("x", "y"))  # no delimiter token: one text only, whatever it says
    with pytest.raises(UsageError, match="^x.tsv: pairs of texts .* takes one text"):
        encode(unlabelled(["ab\tcd"], "x.tsv"), TOKENIZER, hf, 16)


def test_macro_f1_of_many_classes_is_quick_and_right():
    classes = 10_000
    targets = list(range(classes)) * 2
    predicted = targets[:classes] + [0] * classes  # each class once right, then all 0
    f1_zero = 2 * 2 / (2 * 2 + classes - 1 + 0)  # class 0: TP 2, FP 9,999, FN 0
    want = (f1_zero + (classes - 1) * 2 / 3) / classes  # the others: TP 1, FN 1
    assert macro_f1(predicted, targets, classes) == pytest.approx(want, abs=1e-12)
