"""``decoderkit lm data shakespeare-genres``: what it prints and writes (works faked: no
download), and --chars refused where it does not apply."""

from cli.lm.helpers import one_line
from decoderkit.cli import main
from decoderkit.training.lm import genres
from decoderkit.training.lm.genres import FOLIO


def test_shakespeare_genres_writes_and_counts_passages(tmp_path, monkeypatch, capsys):
    works = {f"{stem}_gut.txt": "T\n\nACT I.\n" + f"{stem} says hello\n" * 20 for stem in FOLIO}
    monkeypatch.setattr(genres, "fetch_works", lambda sdist: works)
    assert main(["lm", "data", "shakespeare-genres", "--out", str(tmp_path), "--chars",
                 "40"]) == 0
    out = capsys.readouterr().out.splitlines()
    train = (tmp_path / "train.tsv").read_text().splitlines()
    assert out[0] == f"{tmp_path / 'train.tsv'}: {len(train):,} passages of 40 characters " \
        f"(comedy {sum(x.endswith('comedy') for x in train)}, " \
        f"history {sum(x.endswith('history') for x in train)}, " \
        f"tragedy {sum(x.endswith('tragedy') for x in train)})"
    assert all(len(x.split("\t")[0]) == 40 for x in train)


def test_chars_applies_to_genres_only(tmp_path, capsys):
    assert "--chars applies to shakespeare-genres" in one_line(capsys, [
        "lm", "data", "shakespeare", "--out", str(tmp_path), "--chars", "40"])
