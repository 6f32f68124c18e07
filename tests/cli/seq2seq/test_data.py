"""``decoderkit data bible``: the files and counts printed, a second run reusing them, and a
missing or damaged module as one line naming the package or the file (exit 2)."""

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


def test_data_bible_damaged_module_is_one_line_naming_module_and_file(tmp_path, capsys):
    out = tmp_path / "out"
    sword = install(tmp_path / "sword", out, {"spa": fake_bible("spa"), "eng": fake_bible("eng")})
    records = sword / "modules" / "texts" / "ztext" / "engKJV2006eb" / "nt.bzv"
    records.write_bytes(records.read_bytes()[:-10])
    assert main(["data", "bible", "--out", str(out), "--sword-dir", str(sword)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"decoderkit data: error: the SWORD module engKJV2006eb is damaged: {records} "
                   "holds 8,245 verse records where its versification has 8,246 places "
                   "(truncated?)"]
