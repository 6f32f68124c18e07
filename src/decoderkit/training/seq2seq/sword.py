"""SWORD Bible modules read verse by verse with ``pysword``, cached as JSON beside the data.

A module installed by Debian (``/usr/share/sword/mods.d/NAME.conf`` and its ``zText`` files)
is read with its own versification into ``{book: [[verse text, ...] per chapter]}`` keyed by
OSIS book names (``Gen``, ``Mark``), pysword's OSIS cleaner applied (Strong's numbers and
notes removed). Every place of the versification is read, so an empty verse stays an empty
string in its place (nothing shifts). Reading is ~70-140 s of pure Python per module, so the
result is cached in ``CACHE_DIR/NAME.json`` together with the sha256 of each module file;
a cache whose digests differ is read again. ``read_modules`` reads the uncached modules of a
corpus in parallel processes, one a core (pure Python holds the GIL: threads would not help).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import file_sha256, write_atomic

SWORD_DIR = Path("/usr/share/sword")  # where Debian's sword-text-* packages install modules
Verses = dict[str, list[list[str]]]  # OSIS book -> chapters -> verse texts ('' if empty)


def module_files(sword_dir: Path, name: str, package: str) -> list[Path]:
    """The module's .conf and data files (sorted), or one line naming the Debian package."""
    conf = sword_dir / "mods.d" / f"{name}.conf"
    data = sword_dir / "modules" / "texts" / "ztext" / name
    files = sorted(data.glob("*.bz?")) if data.is_dir() else []
    if not conf.is_file() or not files:
        raise UsageError(f"the SWORD module {name} is not installed in {sword_dir}: install "
                         f"the Debian package {package} (apt-get install {package})")
    return [conf, *files]


def digests(files: list[Path], sword_dir: Path) -> dict[str, str]:
    """{path relative to ``sword_dir``: sha256} of ``files``."""
    return {str(f.relative_to(sword_dir)): file_sha256(f) for f in files}


def read_modules(sword_dir: Path, modules: list[tuple[str, str]], cache_dir: Path,
                 reader: Callable[[Path, str], Verses] | None = None,
                 sums: list[dict[str, str]] | None = None) -> list[Verses]:
    """The verses of each (module, Debian package) in ``modules``, in order: a cached one from
    its cache (digests matching), the others read by ``reader`` (pysword's, by default) in up
    to one process a core, then cached. ``sums``: each module's ``digests`` where the caller
    has them already (computed here otherwise)."""
    if sums is None:
        sums = [digests(module_files(sword_dir, *module), sword_dir) for module in modules]
    found = [_cached(cache_dir / f"{name}.json", s) for (name, _), s in
             zip(modules, sums, strict=True)]
    missing = [i for i, verses in enumerate(found) if verses is None]
    if missing:
        workers = min(len(missing), len(os.sched_getaffinity(0)))
        # spawned, not forked: a fork of a process running torch's threads may hang
        with ProcessPoolExecutor(workers, multiprocessing.get_context("spawn")) as pool:
            read = pool.map(reader or _read_pysword, [sword_dir] * len(missing),
                            [modules[i][0] for i in missing])
            for i, verses in zip(missing, read, strict=True):
                found[i] = verses
                _write_cache(cache_dir / f"{modules[i][0]}.json", sums[i], verses)
    return found


def _cached(cache: Path, sums: dict[str, str]) -> Verses | None:
    """The verses a cache file holds, if it reads and its digests are ``sums``; else None."""
    if not cache.is_file():
        return None
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return cached["verses"] if isinstance(cached, dict) and cached.get("sha256") == sums \
        else None


def _write_cache(cache: Path, sums: dict[str, str], verses: Verses) -> None:
    cache.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"sha256": sums, "verses": verses}, ensure_ascii=False)
    write_atomic(cache, lambda tmp: tmp.write_text(body, encoding="utf-8"))


def _read_pysword(sword_dir: Path, name: str) -> Verses:
    from pysword.modules import SwordModules  # optional: only ``data bible`` needs it

    modules = SwordModules(str(sword_dir))
    modules.parse_modules()
    bible = modules.get_bible_from_module(name)
    verses: Verses = {}
    for books in bible.get_structure().get_books().values():
        for book in books:
            verses[book.osis_name] = [_chapter(bible, book.name, c, n)
                                      for c, n in enumerate(book.chapter_lengths, 1)]
    return verses


def _chapter(bible, book: str, chapter: int, n_verses: int) -> list[str]:
    """The chapter's ``n_verses`` texts; read verse by verse if the chapter's iterator skipped
    any (``get_iter`` drops an empty verse in some pysword versions, shifting the rest)."""
    texts = list(bible.get_iter(books=[book], chapters=[chapter]))
    if len(texts) != n_verses:
        texts = [bible.get(books=[book], chapters=[chapter], verses=[v])
                 for v in range(1, n_verses + 1)]
    return [re.sub(r"\s+", " ", t).strip() for t in texts]
