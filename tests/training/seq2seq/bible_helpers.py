"""Small fake SWORD modules for the ``data bible`` tests: verses whose lengths tell their
places apart, installed with their 'reading' already cached (no pysword)."""

import json
import os
from pathlib import Path

from decoderkit.training.seq2seq import bible as bible_mod
from decoderkit.training.seq2seq.sword import digests, module_files

SPA_WORDS = "el señor dijo a su pueblo que fuese en paz por la tierra de los padres".split()
ENG_WORDS = "the lord said unto his people that they go in peace through the land".split()


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


def reader_pid(sword_dir: Path, name: str) -> dict:
    """A stand-in for pysword's reading (``sword.read_modules``' ``reader``): one verse naming
    the module and the process that read it."""
    return {"Gen": [[f"{name} read by {os.getpid()}"]]}


def install(root: Path, out: Path, verses: dict, cached: bool = True) -> Path:
    """A fake SWORD library under ``root`` and, if ``cached``, ``out/cache`` holding its
    'reading' (``verses``: language -> verses, "web" the second English reference, if
    given)."""
    modules = {**bible_mod.MODULES, "web": bible_mod.REFERENCES["eng"]}
    for lang, (name, _) in modules.items():
        if lang not in verses:
            continue
        (root / "mods.d").mkdir(parents=True, exist_ok=True)
        (root / "mods.d" / f"{name}.conf").write_text(f"[{name}]\n")
        data = root / "modules" / "texts" / "ztext" / name
        data.mkdir(parents=True, exist_ok=True)
        (data / "ot.bzz").write_bytes(lang.encode() * 10)
        if not cached:
            continue
        cache = out / "cache" / f"{name}.json"
        cache.parent.mkdir(parents=True, exist_ok=True)
        sums = digests(module_files(root, *modules[lang]), root)
        cache.write_text(json.dumps({"sha256": sums, "verses": verses[lang]}))
    return root
