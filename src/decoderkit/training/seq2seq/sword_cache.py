"""The cache of a SWORD module's reading, ``NAME.json`` beside the corpus: ``{"sha256": {module
file: digest}, "verses": {book: [[verse text, ...] per chapter]}}``. It is used only if its
digests are those of the module's files now and its verses have that shape; one that does not
read as such (damaged, or not ours) is named on stderr and the module read again."""

from __future__ import annotations

import json
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import describe, write_atomic
from decoderkit.base.text import read_json
from decoderkit.training.distributed import say

CACHE_BYTES = 256 << 20  # the most a cache may hold (a Bible's reading: ~6 MB)


def cached(cache: Path, sums: dict[str, str]) -> dict | None:
    """The verses ``cache`` holds if its digests are ``sums``; None if there is none, the
    module changed, or the cache is damaged (then named on stderr: it is read again)."""
    kind = describe(cache)
    if kind == "does not exist":
        return None
    if kind is not None:
        raise UsageError(f"the cache {cache} {kind}, not a file data bible wrote: move it away")
    try:
        value = read_json(cache, "the cache", CACHE_BYTES)
    except UsageError as err:
        return _damaged(cache, str(err).removeprefix(f"{cache}: "))
    if not isinstance(value, dict) or not isinstance(value.get("sha256"), dict):
        return _damaged(cache, "no 'sha256' of the module's files")
    if value["sha256"] != sums:
        return None  # the module's files changed: read again
    why = not_a_reading(value.get("verses"))
    return _damaged(cache, why) if why else value["verses"]


def not_a_reading(verses: object) -> str | None:
    """What keeps ``verses`` from being a module's reading (a non-empty {book: [[verse text,
    ...] per chapter]}), or None."""
    if not isinstance(verses, dict) or not verses:
        return "its 'verses' are not a map of books to chapters"
    for book, chapters in verses.items():
        if not isinstance(chapters, list) or not chapters:
            return f"its book {book!r} is not a list of chapters"
        for number, chapter in enumerate(chapters, 1):
            if not isinstance(chapter, list) or not all(isinstance(v, str) for v in chapter):
                return f"its {book} {number} is not a list of verse texts"
    return None


def _damaged(cache: Path, why: str) -> None:
    say(f"note: the cache {cache} is damaged ({why}): the module is read again")


def write_cache(cache: Path, sums: dict[str, str], verses: dict) -> None:
    """Write the reading ``verses`` of the module files whose digests are ``sums``."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"sha256": sums, "verses": verses}, ensure_ascii=False)
    write_atomic(cache, lambda tmp: tmp.write_text(body, encoding="utf-8"))
