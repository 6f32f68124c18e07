"""``decoderkit data bible``: the files and counts printed, a second run reusing them, and a
missing module as one line naming the Debian package (exit 2)."""

from decoderkit.cli import main
from training.seq2seq.bible_helpers import fake_bible, install


def test_data_bible_prints_counts_and_reuses(tmp_path, capsys):
    out = tmp_path / "out"
    sword = install(tmp_path / "sword", out, {"spa": fake_bible("spa", {("Gen", 2)}),
                                              "eng": fake_bible("eng")})
    argv = ["data", "bible", "--src", "spa", "--tgt", "eng", "--out", str(out),
            "--sword-dir", str(sword)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert f"{out}/train.tsv: 24 verse pairs spa -> eng" in first
    assert "1 misaligned chapters (Gen 2)" in first
    assert main(argv) == 0 and capsys.readouterr().out == first


def test_data_bible_missing_module_is_one_line(tmp_path, capsys):
    assert main(["data", "bible", "--out", str(tmp_path / "o"), "--sword-dir",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "apt-get install sword-text-sparv" in err[0]
