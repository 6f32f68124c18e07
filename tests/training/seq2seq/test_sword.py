"""``training.seq2seq.sword``: ``read_modules`` reads uncached modules in worker processes and
caches them, never reads a cached one again, reads a changed one; ``open_module`` takes nothing
of a module on trust (its .conf, where its DataPath leads, its files: the files hashed are
the files read)."""

import json
import os
from pathlib import Path

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.training.seq2seq import sword as sword_module
from decoderkit.training.seq2seq.bible_modules import MODULES
from decoderkit.training.seq2seq.sword import open_module, read_modules
from training.seq2seq.bible_helpers import SPA_WORDS, fake_bible, install, reader_pid, \
    write_conf, write_ztext

SPA, ENG = MODULES["spa"], MODULES["eng"]


def refuse(module):  # a reader that must not be called: every module is cached
    raise AssertionError(f"{module.name} was read again")


def opened(sword, *modules):
    return [open_module(sword, *module) for module in modules]


def test_uncached_modules_are_read_in_other_processes_then_cached(tmp_path):
    sword, cache = tmp_path / "sword", tmp_path / "out" / "cache"
    install(sword, tmp_path / "out", {"spa": {}, "eng": {}}, cached=False)
    spa, eng = read_modules(opened(sword, SPA, ENG), cache, reader_pid)
    readers = {text.split(" read by ")[1] for text in (spa["Gen"][0][0], eng["Gen"][0][0])}
    assert spa["Gen"][0][0].startswith(SPA[0]) and eng["Gen"][0][0].startswith(ENG[0])
    assert str(os.getpid()) not in readers  # the reading ran in worker processes
    for name, verses in ((SPA[0], spa), (ENG[0], eng)):
        assert json.loads((cache / f"{name}.json").read_text())["verses"] == verses
    assert read_modules(opened(sword, ENG, SPA), cache, refuse) == [eng, spa]  # the order asked


def test_a_cached_module_is_reused_and_a_changed_one_read_again(tmp_path):
    sword, out = tmp_path / "sword", tmp_path / "out"
    install(sword, out, {"spa": fake_bible("spa"), "eng": fake_bible("eng")})
    assert read_modules(opened(sword, SPA, ENG), out / "cache", refuse) == \
        [fake_bible("spa"), fake_bible("eng")]
    write_ztext(sword / "modules" / "texts" / "ztext" / SPA[0], " ".join(SPA_WORDS[::-1]))
    spa, eng = read_modules(opened(sword, SPA, ENG), out / "cache", reader_pid)
    assert spa["Gen"][0][0].startswith(f"{SPA[0]} read by ") and eng == fake_bible("eng")


def test_a_missing_module_names_its_package_before_any_reading(tmp_path):
    sword = tmp_path / "sword"
    install(sword, tmp_path / "out", {"spa": {}}, cached=False)
    with pytest.raises(UsageError, match="install the Debian package sword-text-kjv"):
        read_modules(opened(sword, SPA, ENG), tmp_path / "out" / "cache", refuse)


def test_digests_the_caller_has_are_not_computed_again(tmp_path, monkeypatch):
    sword, out = tmp_path / "sword", tmp_path / "out"
    install(sword, out, {"spa": fake_bible("spa"), "eng": fake_bible("eng")})
    modules = opened(sword, SPA, ENG)
    sums = [sword_module.digests(module) for module in modules]

    def hashed(path):
        raise AssertionError(f"{path} was hashed again")

    monkeypatch.setattr(sword_module, "file_sha256", hashed)
    assert read_modules(modules, out / "cache", refuse, sums) == \
        [fake_bible("spa"), fake_bible("eng")]


ZTEXT = ("modules", "texts", "ztext")


def test_datapath_outside_the_library_is_refused(tmp_path):
    sword = install(tmp_path / "sword", tmp_path / "out", {"spa": {}}, cached=False)
    write_ztext(tmp_path / "elsewhere", " ".join(SPA_WORDS))
    write_conf(sword, SPA[0], "./../elsewhere/", "es")
    with pytest.raises(UsageError, match=r"spaRV1909eb \(.*spaRV1909eb.conf\): DataPath "
                       r"./../elsewhere/ lies outside the SWORD library"):
        open_module(sword, *SPA)


def test_datapath_of_another_module_is_refused_naming_it(tmp_path):
    sword = install(tmp_path / "sword", tmp_path / "out", {"spa": {}, "eng": {}}, cached=False)
    write_conf(sword, SPA[0], f"./modules/texts/ztext/{ENG[0]}/", "es")
    with pytest.raises(UsageError, match=f"DataPath ./modules/texts/ztext/{ENG[0]}/ is the data "
                       f"of the module {ENG[0]} .*{ENG[0]}.conf.*, not of {SPA[0]}"):
        open_module(sword, *SPA)


def test_the_files_hashed_are_the_files_read_where_datapath_points(tmp_path):
    sword = install(tmp_path / "sword", tmp_path / "out", {"spa": {}}, cached=False)
    (sword.joinpath(*ZTEXT, SPA[0])).rename(sword.joinpath(*ZTEXT, "moved"))
    write_conf(sword, SPA[0], "./modules/texts/ztext/moved/", "es")
    module = open_module(sword, *SPA)
    assert module.data == sword.joinpath(*ZTEXT, "moved")
    assert sorted(sword_module.digests(module)) == sorted(
        [f"mods.d/{SPA[0]}.conf"] + [f"modules/texts/ztext/moved/{t}.bz{k}"
                                     for t in ("ot", "nt") for k in "svz"])


@pytest.mark.parametrize("extra, match", [
    ("ModDrv=RawText\n", "has ModDrv=RawText: only zText modules are read"),
    ("CompressType=BZIP2\n", "has CompressType=BZIP2: only ZIP-compressed modules"),
    ("Encoding=Latin-1\n", "has Encoding=Latin-1: only UTF-8 modules"),
    ("CipherKey=secret\n", "has CipherKey=secret: only unenciphered modules"),
    ("Versification=Martian\n", "has Versification=Martian: only the versifications pysword"),
    ("BlockType=PAGE\n", "has BlockType=PAGE: only BOOK/CHAPTER/VERSE blocks")])
def test_a_conf_in_a_form_not_read_here_is_named(tmp_path, extra, match):
    sword = install(tmp_path / "sword", tmp_path / "out", {"spa": {}}, cached=False)
    conf = sword / "mods.d" / f"{SPA[0]}.conf"
    conf.write_text(conf.read_text() + extra)  # a later key replaces the earlier one
    with pytest.raises(UsageError, match=f"the SWORD module {SPA[0]} \\(.*\\) {match}"):
        open_module(sword, *SPA)


def test_a_conf_of_another_module_or_a_missing_data_file_is_named(tmp_path):
    sword = install(tmp_path / "sword", tmp_path / "out", {"spa": {}}, cached=False)
    sword.joinpath(*ZTEXT, SPA[0], "nt.bzv").unlink()
    with pytest.raises(UsageError, match="its data file .*nt.bzv does not exist: reinstall the "
                       "Debian package sword-text-sparv"):
        open_module(sword, *SPA)
    (sword / "mods.d" / f"{SPA[0]}.conf").write_text("[other]\nDataPath=./x/\n")
    with pytest.raises(UsageError, match=f"has no \\[{SPA[0]}\\] section"):
        open_module(sword, *SPA)
    os.mkfifo(sword / "mods.d" / f"{ENG[0]}.conf")
    with pytest.raises(UsageError, match=f"{ENG[0]}.conf is a named pipe, not a regular file"):
        open_module(sword, *ENG)


def test_a_library_given_by_a_relative_path_is_read(tmp_path, monkeypatch):
    install(tmp_path / "sword", tmp_path / "out", {"spa": {}}, cached=False)
    monkeypatch.chdir(tmp_path)
    module = open_module(Path("sword"), *SPA)
    assert module.data == Path("sword/modules/texts/ztext") / SPA[0]
    assert f"modules/texts/ztext/{SPA[0]}/ot.bzz" in sword_module.digests(module)
