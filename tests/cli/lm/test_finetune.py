"""``decoderkit lm finetune``, ``lm classify`` and ``lm eval --data`` on a run trained here:
what they print equals the library's own computation; refusals are one line."""

import pytest

from cli.lm.helpers import one_line
from decoderkit.cli import main
from decoderkit.training.lm.classifier_checkpoint import open_classifier_checkpoint
from decoderkit.training.lm.finetune import examples_of
from decoderkit.training.lm.labelled import Labelled, classify, evaluate_classifier, read_tsv


@pytest.fixture(scope="module")
def tsv(text, tmp_path_factory):
    """Lines of the run's text labelled by whether they are a speaker's name (all capitals)."""
    lines = [x.strip() for x in text.read_text().splitlines() if len(x.strip()) > 3][:160]
    rows = [f"{x[:20]}\t{'name' if x.isupper() else 'verse'}" for x in lines]
    directory = tmp_path_factory.mktemp("tsv")
    (directory / "train.tsv").write_text("\n".join(rows[:120]) + "\n", encoding="utf-8")
    (directory / "test.tsv").write_text("\n".join(rows[120:]) + "\n", encoding="utf-8")
    return directory / "train.tsv", directory / "test.tsv"


@pytest.fixture(scope="module")
def classifier(run, tsv, tmp_path_factory):
    out = tmp_path_factory.mktemp("clf") / "clf"
    assert main(["lm", "finetune", "--checkpoint", str(run), "--data", str(tsv[0]), "--valid",
                 str(tsv[1]), "--out", str(out), "--lr", "2e-3", "--batch-size", "16",
                 "--epochs", "2", "--quiet"]) == 0
    return out


def test_finetune_writes_a_classifier_of_the_papers_schedule(classifier):
    ckpt = open_classifier_checkpoint(classifier)
    assert ckpt.step == 16 and ckpt.model.config.labels == ("name", "verse")  # 8 a epoch
    train = ckpt.meta["train"]
    assert (train["lm_coef"], train["warmup"], train["weight_decay"]) == (0.5, 0.002, 0.01)
    assert len(ckpt.meta["history"]) == 2


def test_a_resume_with_only_what_changes_keeps_the_runs_flags(run, classifier, tsv, tmp_path):
    import shutil

    shutil.copytree(classifier, tmp_path / "clf")
    assert main(["lm", "finetune", "--checkpoint", str(run), "--data", str(tsv[0]), "--out",
                 str(tmp_path / "clf"), "--resume", "--max-steps", "18"]) == 0
    ckpt = open_classifier_checkpoint(tmp_path / "clf")
    assert ckpt.step == 18 and ckpt.meta["train"]["lr"] == 2e-3  # --lr 2e-3: the run's own
    assert len(ckpt.meta["commands"]) == 2


def test_eval_data_prints_the_librarys_scores(classifier, tsv, capsys):
    ckpt = open_classifier_checkpoint(classifier)
    data = read_tsv(tsv[1])
    m = evaluate_classifier(ckpt.model, examples_of(data, ckpt.tokenizer, ckpt.model),
                            batch_size=32)
    capsys.readouterr()
    assert main(["lm", "eval", "--checkpoint", str(classifier), "--data", str(tsv[1])]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"accuracy {m.accuracy:.4f} | macro-F1 {m.macro_f1:.4f} | "
                          f"loss {m.loss:.4f} | 40 examples")


def test_classify_prints_a_label_per_text(classifier, capsys):
    ckpt = open_classifier_checkpoint(classifier)
    texts = ["HAMLET.", "To be, or not to be"]
    data = Labelled([(t,) for t in texts], [], "TEXT")
    want = classify(ckpt.model, ckpt.tokenizer, data)
    capsys.readouterr()
    assert main(["lm", "classify", "--checkpoint", str(classifier), *texts]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{label}\t{p:.4f}" for label, p in want]


def test_refusals_are_one_line(run, classifier, tsv, tmp_path, capsys):
    (tmp_path / "bad.tsv").write_text("ab\tx\nab\tcd\tx\n", encoding="utf-8")
    assert "bad.tsv:2: 3 tab-separated fields" in one_line(capsys, [
        "lm", "finetune", "--checkpoint", str(run), "--data", str(tmp_path / "bad.tsv"),
        "--out", str(tmp_path / "o")])
    assert "--lm-coef: expected a finite number in [0.0, 10.0]" in one_line(capsys, [
        "lm", "finetune", "--checkpoint", str(run), "--data", str(tsv[0]), "--out",
        str(tmp_path / "o"), "--lm-coef", "-1"])
    assert "is not a fine-tuned classifier" in one_line(capsys, [
        "lm", "classify", "--checkpoint", str(run), "some text"])
    assert "is not a language model: it is an lm finetune run directory, a fine-tuned " \
        "classifier; use `decoderkit lm classify`" in one_line(
        capsys, ["lm", "sample", "--checkpoint", str(classifier), "--prompt", "HAMLET."])
    assert "it is an lm finetune run directory, a fine-tuned classifier" in one_line(capsys, [
        "lm", "finetune", "--checkpoint", str(classifier), "--data", str(tsv[0]), "--out",
        str(tmp_path / "o")])
    assert "--block-size applies to --text" in one_line(capsys, [
        "lm", "eval", "--checkpoint", str(classifier), "--data", str(tsv[1]),
        "--block-size", "4"])
    assert "--batch-size x --accum x the model's context = 1048576 x 1048576 x 16 = " \
        in one_line(capsys, ["lm", "finetune", "--checkpoint", str(run), "--data", str(tsv[0]),
                             "--out", str(tmp_path / "o"), "--batch-size", "1048576",
                             "--accum", "1048576"])
    assert not (tmp_path / "o").exists()


def test_export_to_transformers_classifies_the_same(classifier, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    import torch

    from decoderkit.nn.lm.classifier import transform

    assert main(["lm", "export", "--to", "transformers", "--checkpoint", str(classifier),
                 "--out", str(tmp_path / "hf")]) == 0
    assert "GPT2ForSequenceClassification.from_pretrained loads it" in capsys.readouterr().out
    texts = ["HAMLET.", "To be, or not"]  # within the 16-token context with <s> and <e>
    for checkpoint in (classifier, tmp_path / "hf"):
        assert main(["lm", "classify", "--checkpoint", str(checkpoint), *texts]) == 0
    ours, hf_dir = capsys.readouterr().out.splitlines(), tmp_path / "hf"
    assert ours[:2] == ours[2:]  # the export labels as the run directory does
    ckpt = open_classifier_checkpoint(classifier)
    hf = transformers.GPT2ForSequenceClassification.from_pretrained(hf_dir).eval()
    ids = torch.tensor([transform(ckpt.model.config, ckpt.tokenizer.encode(texts[1]))])
    with torch.no_grad():
        want = ckpt.model(ids, torch.tensor([ids.size(1) - 1]))
        assert float((hf(ids).logits - want).abs().max()) <= 1e-5


def test_an_openai_gpt_directory_fine_tunes_from_text(tmp_path, capsys):
    """GPT-1's own tokenizer makes an openai-gpt directory fine-tune from TSV text."""
    transformers = pytest.importorskip("transformers")
    import torch
    from conftest import openai_gpt_files

    text = "the cat sat on the mat. a dog ran in the park! the end, the start."
    openai_gpt_files(tmp_path, text)
    vocab = len(transformers.OpenAIGPTTokenizer(vocab=str(tmp_path / "vocab.json"),
                                                merges=str(tmp_path / "merges.txt")))
    torch.manual_seed(0)
    transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(
        vocab_size=vocab, n_positions=32, n_embd=16, n_layer=1, n_head=2)).save_pretrained(
        tmp_path)
    rows = ["the cat sat on the mat\tcat" if i % 2 else "a dog ran in the park\tdog"
            for i in range(16)]
    (tmp_path / "d.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert main(["lm", "finetune", "--checkpoint", str(tmp_path), "--data",
                 str(tmp_path / "d.tsv"), "--out", str(tmp_path / "clf"), "--lr", "1e-2",
                 "--batch-size", "4", "--epochs", "10", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["lm", "classify", "--checkpoint", str(tmp_path / "clf"),
                 "The CAT sat on the Mat", "A DOG ran in the park"]) == 0  # lowercased
    labels = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
    assert labels == ["cat", "dog"]


@pytest.fixture(scope="module")
def pairs(run, tsv, tmp_path_factory):
    """A classifier fine-tuned on pairs (two steps), and its pairs TSV."""
    directory = tmp_path_factory.mktemp("pairs")
    rows = [f"{text}\t{text[:5]}\t{label}" for text, label in (
        line.split("\t") for line in tsv[0].read_text(encoding="utf-8").splitlines())]
    (directory / "pairs.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert main(["lm", "finetune", "--checkpoint", str(run), "--data",
                 str(directory / "pairs.tsv"), "--out", str(directory / "clf"),
                 "--max-steps", "2", "--batch-size", "8", "--quiet"]) == 0
    return directory / "clf", directory / "pairs.tsv"


def _stdin(monkeypatch, data: bytes) -> None:
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_every_way_in_holds_to_the_tsv_rules_and_the_models_input(
        classifier, pairs, tsv, capsys, monkeypatch):
    single, pair, pair_tsv = str(classifier), str(pairs[0]), str(pairs[1])
    cases = [
        (["lm", "classify", "--checkpoint", single, ""], "TEXT: example 1: an empty text"),
        (["lm", "classify", "--checkpoint", single, "HAMLET.", "\t"],
         "TEXT: example 2: an empty text"),
        (["lm", "classify", "--checkpoint", single, "a\tb\tc"],
         "TEXT: example 1: 3 tab-separated texts, expected 1 (text) or 2 (text TAB text)"),
        (["lm", "classify", "--checkpoint", single, "HAMLET.\tTo be"],
         "TEXT: pairs of texts (text TAB text), but the classifier takes one text per example"),
        (["lm", "classify", "--checkpoint", pair, "HAMLET."],
         "TEXT: single texts, but the classifier takes a pair of texts (text TAB text) per "
         "example"),
        (["lm", "eval", "--checkpoint", single, "--data", pair_tsv],
         f"{pair_tsv}: pairs of texts (text TAB text), but the classifier takes one text"),
        (["lm", "eval", "--checkpoint", pair, "--data", str(tsv[1])],
         f"{tsv[1]}: single texts, but the classifier takes a pair of texts"),
    ]
    for argv, needle in cases:
        line = one_line(capsys, argv)
        assert needle in line, (argv, line)
    _stdin(monkeypatch, b"HAMLET.\n\nTo be\n")
    assert one_line(capsys, ["lm", "classify", "--checkpoint", single]).endswith(
        "stdin: example 2: an empty text")
    _stdin(monkeypatch, b"HAMLET.\tTo be\n")
    assert one_line(capsys, ["lm", "classify", "--checkpoint", single]).endswith(
        "stdin: pairs of texts (text TAB text), but the classifier takes one text per example")


def test_classify_reads_stdin_as_it_reads_its_arguments(pairs, capsys, monkeypatch):
    texts = ["HAMLET.\tTo be", "Ay, my lord.\tHORATIO."]
    assert main(["lm", "classify", "--checkpoint", str(pairs[0]), *texts]) == 0
    given = capsys.readouterr().out
    _stdin(monkeypatch, ("\n".join(texts) + "\n").encode())
    assert main(["lm", "classify", "--checkpoint", str(pairs[0])]) == 0
    assert capsys.readouterr().out == given and len(given.splitlines()) == 2
