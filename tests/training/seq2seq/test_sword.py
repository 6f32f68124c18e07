"""``training.seq2seq.sword.read_modules``: uncached modules are read in worker processes and
cached; a cached one is never read again; a changed module file is."""

import json
import os

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.training.seq2seq import bible as bible_mod
from decoderkit.training.seq2seq import sword as sword_module
from decoderkit.training.seq2seq.sword import read_modules
from training.seq2seq.bible_helpers import fake_bible, install, reader_pid

SPA, ENG = bible_mod.MODULES["spa"], bible_mod.MODULES["eng"]


def refuse(sword_dir, name):  # a reader that must not be called: every module is cached
    raise AssertionError(f"{name} was read again")


def test_uncached_modules_are_read_in_other_processes_then_cached(tmp_path):
    sword, cache = tmp_path / "sword", tmp_path / "out" / "cache"
    install(sword, tmp_path / "out", {"spa": {}, "eng": {}}, cached=False)
    spa, eng = read_modules(sword, [SPA, ENG], cache, reader_pid)
    readers = {text.split(" read by ")[1] for text in (spa["Gen"][0][0], eng["Gen"][0][0])}
    assert spa["Gen"][0][0].startswith(SPA[0]) and eng["Gen"][0][0].startswith(ENG[0])
    assert str(os.getpid()) not in readers  # the reading ran in worker processes
    for name, verses in ((SPA[0], spa), (ENG[0], eng)):
        assert json.loads((cache / f"{name}.json").read_text())["verses"] == verses
    assert read_modules(sword, [ENG, SPA], cache, refuse) == [eng, spa]  # the order asked


def test_a_cached_module_is_reused_and_a_changed_one_read_again(tmp_path):
    sword, out = tmp_path / "sword", tmp_path / "out"
    install(sword, out, {"spa": fake_bible("spa"), "eng": fake_bible("eng")})
    assert read_modules(sword, [SPA, ENG], out / "cache", refuse) == \
        [fake_bible("spa"), fake_bible("eng")]
    (sword / "modules" / "texts" / "ztext" / SPA[0] / "ot.bzz").write_bytes(b"another text")
    spa, eng = read_modules(sword, [SPA, ENG], out / "cache", reader_pid)
    assert spa["Gen"][0][0].startswith(f"{SPA[0]} read by ") and eng == fake_bible("eng")


def test_a_missing_module_names_its_package_before_any_reading(tmp_path):
    sword = tmp_path / "sword"
    install(sword, tmp_path / "out", {"spa": {}}, cached=False)
    with pytest.raises(UsageError, match="install the Debian package sword-text-kjv"):
        read_modules(sword, [SPA, ENG], tmp_path / "out" / "cache", refuse)


def test_digests_the_caller_has_are_not_computed_again(tmp_path, monkeypatch):
    sword, out = tmp_path / "sword", tmp_path / "out"
    install(sword, out, {"spa": fake_bible("spa"), "eng": fake_bible("eng")})
    sums = [sword_module.digests(sword_module.module_files(sword, *m), sword) for m in (SPA, ENG)]

    def hashed(path):
        raise AssertionError(f"{path} was hashed again")

    monkeypatch.setattr(sword_module, "file_sha256", hashed)
    assert read_modules(sword, [SPA, ENG], out / "cache", refuse, sums) == \
        [fake_bible("spa"), fake_bible("eng")]
