"""``training.seq2seq.bible``: cleaning, alignment, the book split, the manifest and reuse, on
small fake SWORD modules (the cache path: no pysword reading), and the facts the corpus rests
on checked against Debian's real modules when they are installed."""

import json
import shutil

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.base.files import file_sha256
from decoderkit.training.seq2seq import bible as bible_mod
from decoderkit.training.seq2seq.bible import DEV, MANIFEST, TEST, TRAIN, align, bible, \
    clean_module, clean_verse
from decoderkit.training.seq2seq.bible_modules import MODULES
from decoderkit.training.seq2seq.sword import SWORD_DIR
from training.seq2seq.bible_helpers import ENG_WORDS, SPA_WORDS, copy_real, fake_bible, \
    fake_web, install, verse, write_conf

SPA, ENG = MODULES["spa"][0], MODULES["eng"][0]

@pytest.fixture
def fake(tmp_path):
    out = tmp_path / "out"
    sword = install(tmp_path / "sword", out, {"spa": fake_bible("spa", {("Gen", 2)}),
                                              "eng": fake_bible("eng")})
    return sword, out


def test_clean_verse_rules():
    assert clean_verse("  In the ¶ beginning \\nd LORD  said ") == "In the beginning LORD said"
    usual = {"en": "en", "aconteció": "aconteció", "jehová": "Jehová"}
    assert clean_verse("EN el principio", usual) == "En el principio"
    assert clean_verse("Y ACONTECIÓ que", usual) == "Y aconteció que"
    assert clean_verse("Y JEHOVÁ dijo", usual) == "Y Jehová dijo"
    assert clean_verse("¿SACARÁS tú", {}) == "¿Sacarás tú"
    assert clean_verse("EN el principio") == "EN el principio"  # not an opening verse


def test_clean_module_respells_openings_by_the_module_usage():
    verses = {"Gen": [["JEHOVÁ habló", "y Jehová dijo", "Jehová vio"]]}
    assert clean_module(verses)["Gen"][0][0] == "Jehová habló"


def test_align_drops_the_shifted_chapter_only():
    spa, eng = fake_bible("spa", {("Gen", 2)}), fake_bible("eng")
    splits, dropped, empty = align(spa, eng)
    assert [(d["book"], d["chapter"], d["best_shift"]) for d in dropped] == [("Gen", 2, 1)]
    assert (len(splits[TRAIN]), len(splits[DEV]), len(splits[TEST]), empty) == (24, 12, 12, 0)
    assert splits[TEST][0] == (spa["Mark"][0][0], eng["Mark"][0][0], ("Mark", 0, 0))


def test_align_keeps_a_chapter_whose_empty_verse_shifts_nothing():
    spa, eng = fake_bible("spa"), fake_bible("eng")
    spa["Gen"][0][11] = ""  # the last verse missing, nothing moved
    splits, dropped, empty = align(spa, eng)
    assert dropped == [] and empty == 1 and len(splits[TRAIN]) == 35


def test_bible_writes_split_files_and_manifest(fake):
    sword, out = fake
    manifest = bible(out, "spa", "eng", sword)
    lines = (out / TEST).read_text().splitlines()
    assert len(lines) == manifest["counts"][TEST] == 12
    assert all(len(line.split("\t")) == 2 for line in lines)
    saved = json.loads((out / MANIFEST).read_text())
    assert saved["test_references"]["columns"] == 2  # no second reference installed
    assert "install the Debian package sword-text-web" in saved["test_references"]["missing"]
    assert saved["counts"] == {TRAIN: 24, DEV: 12, TEST: 12}
    assert saved["dropped_chapters"][0]["chapter"] == 2 and saved["rules"]
    first = (out / TRAIN).read_text().splitlines()[0].split("\t")
    assert first == [verse(SPA_WORDS, 13), verse(ENG_WORDS, 13)]  # Gen 1:1, source first


def test_second_run_reuses_and_foreign_files_are_refused(fake):
    sword, out = fake
    bible(out, "spa", "eng", sword)
    before = (out / TRAIN).stat().st_mtime_ns
    bible(out, "spa", "eng", sword)
    assert (out / TRAIN).stat().st_mtime_ns == before
    with pytest.raises(UsageError, match="train.tsv exists and is not this command's output"):
        bible(out, "eng", "spa", sword)  # the other direction is another corpus


def test_second_reference_is_the_third_column_of_the_test_file(tmp_path):
    out = tmp_path / "out"
    texts = {"spa": fake_bible("spa"), "eng": fake_bible("eng"), "web": fake_web()}
    sword = install(tmp_path / "sword", out, texts)
    manifest = bible(out, "spa", "eng", sword)
    rows = [line.split("\t") for line in (out / TEST).read_text().splitlines()]
    mark = texts["web"]["Mark"][0]
    assert rows == [[s, t, w] for s, t, w in zip(texts["spa"]["Mark"][0],
                                                  texts["eng"]["Mark"][0], mark, strict=True)]
    assert all(len(line.split("\t")) == 2 for line in (out / TRAIN).read_text().splitlines())
    assert manifest["test_references"] == {"columns": 3, "missing": None,
                                           "second": "engWEB2015eb", "verses": 12, "without": 0}
    assert "eng-reference" in manifest["module_sha256"]


def test_second_reference_left_empty_where_its_chapter_does_not_align():
    test = [("s", "t", ("Gen", 2, i)) for i in range(12)] + [("s", "t", ("Gen", 0, 0))]
    texts = bible_mod.second_reference(test, fake_bible("eng"), fake_web())
    assert texts[:12] == [""] * 12 and texts[12] == fake_web()["Gen"][0][0]
    web = fake_web()
    web["Gen"][0] = web["Gen"][0][1:] + [""]  # shifted by one verse: not aligned
    assert bible_mod.second_reference(test[12:], fake_bible("eng"), web) == [""]


def test_an_earlier_run_is_rewritten_when_a_reference_module_arrives(fake, tmp_path):
    sword, out = fake
    bible(out, "spa", "eng", sword)
    install(sword, out, {"web": fake_web()})
    assert bible(out, "spa", "eng", sword)["test_references"]["columns"] == 3
    assert len((out / TEST).read_text().splitlines()[0].split("\t")) == 3


def test_missing_module_names_the_debian_package(tmp_path):
    with pytest.raises(UsageError, match="install the Debian package sword-text-sparv"):
        bible(tmp_path / "out", "spa", "eng", tmp_path)


def test_bad_languages_are_refused(tmp_path):
    with pytest.raises(UsageError, match="--src must be one of eng, spa, got 'fra'"):
        bible(tmp_path, "fra", "eng")
    with pytest.raises(UsageError, match="must differ"):
        bible(tmp_path, "eng", "eng")


def test_a_conf_whose_datapath_is_another_modules_is_refused_before_anything(fake):
    sword, out = fake
    write_conf(sword, SPA, f"./modules/texts/ztext/{ENG}/", "es")
    with pytest.raises(UsageError, match=f"DataPath ./modules/texts/ztext/{ENG}/ is the data of "
                       f"the module {ENG}"):
        bible(out, "spa", "eng", sword)
    assert not (out / TRAIN).exists()


def test_a_datapath_outside_the_library_is_refused(fake, tmp_path):
    sword, out = fake
    (sword / "modules").rename(tmp_path / "modules")
    write_conf(sword, SPA, f"./../modules/texts/ztext/{SPA}/", "es")
    with pytest.raises(UsageError, match=f"DataPath ./../modules/texts/ztext/{SPA}/ lies outside "
                       f"the SWORD library {sword}"):
        bible(out, "spa", "eng", sword)


def test_the_manifest_hashes_the_files_read(fake):
    sword, out = fake
    ztext = sword / "modules" / "texts" / "ztext"
    (ztext / SPA).rename(ztext / "moved")
    write_conf(sword, SPA, "./modules/texts/ztext/moved/", "es")
    install(sword, out, {"eng": fake_bible("eng")})  # the caches of these very files
    cache = out / "cache" / f"{SPA}.json"
    sums = {f"mods.d/{SPA}.conf": file_sha256(sword / "mods.d" / f"{SPA}.conf")} | {
        f"modules/texts/ztext/moved/{n}": file_sha256(ztext / "moved" / n)
        for n in ("ot.bzv", "ot.bzs", "ot.bzz", "nt.bzv", "nt.bzs", "nt.bzz")}
    cache.write_text(json.dumps({"sha256": sums, "verses": fake_bible("spa")}))
    assert bible(out, "spa", "eng", sword)["module_sha256"]["spa"] == sums


def test_a_cache_whose_places_differ_is_named(fake):
    sword, out = fake
    cache = out / "cache" / f"{SPA}.json"
    saved = json.loads(cache.read_text())
    saved["verses"]["Gen"][0].pop()  # the digests still match
    cache.write_text(json.dumps(saved))
    with pytest.raises(UsageError, match=f"readings of {SPA} and {ENG} differ in Gen .* a cache "
                       f"in {out / 'cache'} is damaged"):
        bible(out, "spa", "eng", sword)


def test_real_modules_misdirected_or_truncated_are_named(tmp_path):
    """Copies of Debian's modules: the Spanish .conf pointing at the KJV's data, the KJV's
    files put in the Spanish module's place, and a truncated Spanish text file are each one
    line, before any reading."""
    sword = copy_real(tmp_path / "sword", SPA, ENG)
    conf = sword / "mods.d" / f"{SPA}.conf"
    spanish = conf.read_text()
    conf.write_text(spanish.replace(f"ztext/{SPA}/", f"ztext/{ENG}/"))
    with pytest.raises(UsageError, match=f"is the data of the module {ENG}"):
        bible(tmp_path / "out", "spa", "eng", sword)
    conf.write_text(spanish)
    data = sword / "modules" / "texts" / "ztext"
    (data / SPA).rename(data / "spa")
    shutil.copytree(data / ENG, data / SPA)
    with pytest.raises(UsageError, match=f"{SPA}'s text .* is not Spanish"):
        bible(tmp_path / "out", "spa", "eng", sword)
    shutil.rmtree(data / SPA)
    (data / "spa").rename(data / SPA)
    text = data / SPA / "ot.bzz"
    text.write_bytes(text.read_bytes()[:text.stat().st_size // 2])
    with pytest.raises(UsageError, match=f"the SWORD module {SPA} is damaged: {text} ends at "
                       r"byte .* \(truncated\?\)"):
        bible(tmp_path / "out", "spa", "eng", sword)
    assert not (tmp_path / "out").exists()


REAL = all((SWORD_DIR / "mods.d" / f"{n}.conf").is_file() for n, _ in MODULES.values())


@pytest.mark.skipif(not REAL, reason="Debian's sword-text-kjv / sword-text-sparv not installed "
                    "(make test installs them)")
def test_real_modules_facts():
    """KJV versification: 31,102 verses; RV1909's empty place Job 40:20 stays in its place
    (read whole chapters or verse by verse: nothing shifts)."""
    from pysword.modules import SwordModules

    from decoderkit.training.seq2seq.sword import _chapter

    modules = SwordModules(str(SWORD_DIR))
    modules.parse_modules()
    spa = modules.get_bible_from_module("spaRV1909eb")
    books = [b for bs in spa.get_structure().get_books().values() for b in bs]
    assert sum(sum(b.chapter_lengths) for b in books) == 31102
    job40 = _chapter(spa, "Job", 40, 24)
    assert len(job40) == 24 and job40[19:] == [""] * 5 and all(job40[:19])
