"""Small fake SWORD modules for the ``data bible`` tests: real zText files (every verse one
text in the module's language, so the files pass the checks) with their 'reading' already
cached (no pysword), and copies of Debian's real modules to damage."""

import json
import os
import shutil
import zlib
from pathlib import Path

import pytest

from decoderkit.training.seq2seq.bible_modules import MODULES, REFERENCES
from decoderkit.training.seq2seq.sword import SWORD_DIR, digests, open_module
from decoderkit.training.seq2seq.ztext import BLOCK, RECORD, TESTAMENTS, file_names, places

SPA_WORDS = "el señor dijo a su pueblo que fuese en paz por la tierra de los padres".split()
ENG_WORDS = "the lord said unto his people that they go in peace through the land".split()
# the fakes' languages: language -> (module, package, Lang, versification, words)
FAKES = {"spa": (*MODULES["spa"], "es", "KJV", SPA_WORDS),
         "eng": (*MODULES["eng"], "en", "KJV", ENG_WORDS),
         "web": (*REFERENCES["eng"], "en", "NRSVA", ENG_WORDS[::-1])}


def verse(words, n):
    """A verse of n + 3 words (lengths vary with n, so alignment can be told)."""
    return " ".join(words[(n + i) % len(words)] for i in range(3 + (n * 7) % 11))


def fake_bible(lang, shifted=()):
    """Books Gen (3 chapters), Ruth, Mark: 12 verses a chapter; ``shifted`` chapters of the
    Spanish lose verse 1 and move up by one (what RV1909 does at an empty place)."""
    words = SPA_WORDS if lang == "spa" else ENG_WORDS
    books = {}
    for book, chapters in (("Gen", 3), ("Ruth", 1), ("Mark", 1)):
        books[book] = []
        for c in range(1, chapters + 1):
            texts = [verse(words, 13 * c + v) for v in range(12)]
            if lang == "spa" and (book, c) in shifted:
                texts = texts[1:] + [""]  # every verse one place early, the last empty
            books[book].append(texts)
    return books


def fake_web():
    """A second English text of the same verses (the KJV's words reversed: the same lengths),
    whose Gen 3 lacks its last verse (a chapter that cannot be aligned)."""
    books = {b: [[" ".join(reversed(v.split())) for v in ch] for ch in chapters]
             for b, chapters in fake_bible("eng").items()}
    books["Gen"][2] = books["Gen"][2][:-1]
    return books


def reader_pid(module) -> dict:
    """A stand-in for pysword's reading (``sword.read_modules``' ``reader``): one verse naming
    the module and the process that read it."""
    return {"Gen": [[f"{module.name} read by {os.getpid()}"]]}


def write_ztext(data: Path, text: str, versification: str = "kjv") -> None:
    """A valid zText module in ``data``: one block a testament, every verse ``text``."""
    data.mkdir(parents=True, exist_ok=True)
    raw = text.encode()
    for testament in TESTAMENTS:
        records, table, body = (data / n for n in file_names(testament, "b"))
        body.write_bytes(zlib.compress(raw))
        table.write_bytes(BLOCK.pack(0, body.stat().st_size, len(raw)))
        n = places(versification, testament)
        records.write_bytes(RECORD.pack(0, 0, 0) * 2 + RECORD.pack(0, 0, len(raw)) * (n - 2))


def write_conf(root: Path, name: str, data_path: str, lang: str = "en",
               versification: str = "KJV", extra: str = "") -> Path:
    """The .conf of module ``name`` in the library ``root``."""
    conf = root / "mods.d" / f"{name}.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(f"# a test module\n[{name}]\nDataPath={data_path}\nModDrv=zText\n"
                    f"Encoding=UTF-8\nLang={lang}\nVersification={versification}\n{extra}")
    return conf


def install(root: Path, out: Path, verses: dict, cached: bool = True) -> Path:
    """A fake SWORD library under ``root`` and, if ``cached``, ``out/cache`` holding its
    'reading' (``verses``: language -> verses, "web" the second English reference, if
    given)."""
    for lang in verses:
        name, package, code, versification, words = FAKES[lang]
        write_conf(root, name, f"./modules/texts/ztext/{name}/", code, versification)
        write_ztext(root / "modules" / "texts" / "ztext" / name, " ".join(words),
                    versification.lower())
        if cached:
            cache = out / "cache" / f"{name}.json"
            cache.parent.mkdir(parents=True, exist_ok=True)
            sums = digests(open_module(root, name, package))
            cache.write_text(json.dumps({"sha256": sums, "verses": verses[lang]}))
    return root


def copy_real(root: Path, *names: str) -> Path:
    """Copies of Debian's installed modules ``names`` (.conf and data) in a library ``root``;
    skips the test where they are not installed (``make sword`` installs them)."""
    for name in names:
        conf = SWORD_DIR / "mods.d" / f"{name}.conf"
        if not conf.is_file():
            pytest.skip(f"Debian's SWORD module {name} is not installed (make sword)")
        (root / "mods.d").mkdir(parents=True, exist_ok=True)
        shutil.copy(conf, root / "mods.d")
        shutil.copytree(SWORD_DIR / "modules" / "texts" / "ztext" / name,
                        root / "modules" / "texts" / "ztext" / name)
    return root
