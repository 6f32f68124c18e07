"""``training.seq2seq.bible_modules``: the corpus's modules checked for what they are: the
.conf's Lang and the language of the text itself, no two the same text, one versification
for source and target, and readings with the same places."""

import shutil

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.training.seq2seq.bible_modules import MODULES, REFERENCES, check_distinct, \
    check_places, corpus_modules
from decoderkit.training.seq2seq.sword import digests
from training.seq2seq.bible_helpers import ENG_WORDS, SPA_WORDS, fake_bible, install, \
    write_conf, write_ztext

SPA, ENG, WEB = MODULES["spa"][0], MODULES["eng"][0], REFERENCES["eng"][0]


@pytest.fixture
def sword(tmp_path):
    return install(tmp_path / "sword", tmp_path / "out", {"spa": {}, "eng": {}}, cached=False)


def data(sword, name):
    return sword / "modules" / "texts" / "ztext" / name


def test_the_installed_modules_are_found_and_a_missing_reference_named(sword):
    modules, missing = corpus_modules(sword, "spa", "eng")
    assert {role: m.name for role, m in modules.items()} == {"spa": SPA, "eng": ENG}
    assert "install the Debian package sword-text-web" in missing
    install(sword, sword / "out", {"web": {}}, cached=False)
    modules, missing = corpus_modules(sword, "eng", "spa")
    assert list(modules) == ["eng", "spa"] and missing is None  # no Spanish reference


def test_a_conf_whose_lang_is_another_language_is_refused(sword):
    write_conf(sword, SPA, f"./modules/texts/ztext/{SPA}/", "en")
    with pytest.raises(UsageError, match=f"{SPA} .*{SPA}.conf\\) has Lang=en, not Spanish"):
        corpus_modules(sword, "spa", "eng")


def test_a_text_in_another_language_is_refused_whatever_the_conf_says(sword):
    write_ztext(data(sword, SPA), " ".join(ENG_WORDS))  # English files where the Spanish were
    with pytest.raises(UsageError, match=f"the SWORD module {SPA}'s text \\(.*{SPA}\\) is not "
                       "Spanish: common Spanish words are 0.0% of it, common English ones"):
        corpus_modules(sword, "spa", "eng")
    write_ztext(data(sword, SPA), " ".join(SPA_WORDS))
    write_ztext(data(sword, ENG), " ".join(SPA_WORDS))
    with pytest.raises(UsageError, match=f"{ENG}'s text .* is not English"):
        corpus_modules(sword, "spa", "eng")


def test_a_damaged_reference_is_refused_not_taken_for_missing(sword):
    install(sword, sword / "out", {"web": {}}, cached=False)
    (data(sword, WEB) / "nt.bzz").write_bytes(b"")
    with pytest.raises(UsageError, match=f"the SWORD module {WEB} is damaged: .*nt.bzz"):
        corpus_modules(sword, "spa", "eng")


def test_two_modules_with_the_same_text_are_refused(sword):
    install(sword, sword / "out", {"web": {}}, cached=False)
    shutil.rmtree(data(sword, WEB))
    shutil.copytree(data(sword, ENG), data(sword, WEB))
    write_conf(sword, WEB, f"./modules/texts/ztext/{WEB}/")  # the KJV's versification
    modules, _ = corpus_modules(sword, "spa", "eng")
    with pytest.raises(UsageError, match=f"the SWORD modules {ENG} and {WEB} hold the same text"):
        check_distinct(modules, {role: digests(m) for role, m in modules.items()})


def test_source_and_target_of_two_versifications_are_refused(sword):
    write_conf(sword, SPA, f"./modules/texts/ztext/{SPA}/", "es", "NRSVA")
    write_ztext(data(sword, SPA), " ".join(SPA_WORDS), "nrsva")
    with pytest.raises(UsageError, match=f"{SPA} \\(--src\\) and {ENG} \\(--tgt\\) have the "
                       "versifications nrsva and kjv"):
        corpus_modules(sword, "spa", "eng")


def test_readings_with_other_places_are_refused_naming_the_cache(sword, tmp_path):
    modules, _ = corpus_modules(sword, "spa", "eng")
    spa, eng = fake_bible("spa"), fake_bible("eng")
    check_places((modules["spa"], spa), (modules["eng"], eng), tmp_path)
    spa["Gen"][1].pop()
    with pytest.raises(UsageError, match=r"differ in Gen \(verses per chapter \[12, 11, 12\] "
                       rf"and \[12, 12, 12\]\) though both are kjv: a cache in {tmp_path} is "
                       "damaged"):
        check_places((modules["spa"], spa), (modules["eng"], eng), tmp_path)
