"""SWORD Bible modules read verse by verse with ``pysword``, cached as JSON beside the data.

A module installed by Debian (``/usr/share/sword/mods.d/NAME.conf`` and its ``zText`` files)
is read with its own versification into ``{book: [[verse text, ...] per chapter]}`` keyed by
OSIS book names (``Gen``, ``Mark``), pysword's OSIS cleaner applied (Strong's numbers and
notes removed). Every place of the versification is read, so an empty verse stays an empty
string in its place (nothing shifts). Reading is ~70-140 s of pure Python per module, so the
result is cached in ``CACHE_DIR/NAME.json`` together with the sha256 of each module file;
a cache whose digests differ is read again. ``read_modules`` reads the uncached modules of a
corpus in parallel processes, one a core (pure Python holds the GIL: threads would not help).

Nothing of a module is taken on trust (``open_module``): its ``.conf`` must describe it, in a
form read here (zText, ZIP, UTF-8, not enciphered), its ``DataPath`` must lie inside the
library and be no other module's data, and its files are checked whole (``ztext``). The files
hashed are the files read: pysword is given the data directory resolved here, never left to
pick a module by name among every ``.conf`` of the library.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import describe, file_sha256
from decoderkit.training.seq2seq.sword_cache import cached, write_cache
from decoderkit.training.seq2seq.sword_conf import conf_sections, settings
from decoderkit.training.seq2seq.ztext import TESTAMENTS, checked_texts, file_names

SWORD_DIR = Path("/usr/share/sword")  # where Debian's sword-text-* packages install modules
Verses = dict[str, list[list[str]]]  # OSIS book -> chapters -> verse texts ('' if empty)


@dataclass(frozen=True)
class Module:
    """A SWORD module as its ``.conf`` describes it, its data directory resolved in ``root``."""
    name: str
    package: str  # the Debian package that installs it
    root: Path  # the library (holding mods.d/)
    conf: Path
    data: Path
    lang: str  # the .conf's Lang ('' if none)
    versification: str  # a pysword canon, lower case
    block_type: str  # BOOK, CHAPTER or VERSE: what one compressed block holds
    source_type: str

    @property
    def files(self) -> list[Path]:
        """The .conf and the data files pysword reads, in order."""
        block = self.block_type[0].lower()
        return [self.conf, *(self.data / n for t in TESTAMENTS for n in file_names(t, block))]

    def texts(self) -> list[str]:
        """Every verse record's raw text, after checking the files whole (``ztext``)."""
        return checked_texts(self.name, self.data, self.block_type[0].lower(),
                             self.versification)


def installed(root: Path, name: str) -> bool:
    """True if the library ``root`` has a .conf for module ``name`` (whatever its state)."""
    return describe(root / "mods.d" / f"{name}.conf") != "does not exist"


def not_installed(root: Path, name: str, package: str) -> str:
    """The line saying module ``name`` is not in ``root`` and which Debian package has it."""
    return (f"the SWORD module {name} is not installed in {root}: install the Debian package "
            f"{package} (apt-get install {package})")


def open_module(root: Path, name: str, package: str) -> Module:
    """Module ``name`` of the library ``root``, its .conf and files checked; one line naming the
    Debian package if it is not installed, or naming the .conf and what is wrong."""
    conf = root / "mods.d" / f"{name}.conf"
    if not installed(root, name):
        raise UsageError(not_installed(root, name, package))
    where = f"the SWORD module {name} ({conf})"
    fields = conf_sections(conf, where).get(name)
    if fields is None:
        raise UsageError(f"{where} has no [{name}] section: it describes another module")
    found = settings(fields, where)
    data = _data_dir(root, name, conf, fields.get("datapath", ""), where)
    module = Module(name, package, root, conf, data, found["lang"], found["versification"],
                    found["block_type"], found["sourcetype"])
    for file in module.files[1:]:
        kind = describe(file)
        if kind is not None:
            raise UsageError(f"{where}: its data file {file} {kind}: reinstall the Debian "
                             f"package {package} (apt-get install --reinstall {package})")
    return module


def _data_dir(root: Path, name: str, conf: Path, path: str, where: str) -> Path:
    """The .conf's DataPath resolved, refused if it is missing, lies outside the library or is
    the DataPath of another module of the library (whose files would be read as this one)."""
    if not path:
        raise UsageError(f"{where} has no DataPath")
    library = root.resolve()
    data = (library / path).resolve()
    if not data.is_relative_to(library):
        raise UsageError(f"{where}: DataPath {path} lies outside the SWORD library {root} "
                         f"({data}); refusing to read it")
    for other_conf in sorted((root / "mods.d").glob("*.conf")):
        try:
            sections = conf_sections(other_conf, str(other_conf))
        except UsageError:
            continue  # another module's unreadable .conf claims nothing
        for other, fields in sections.items():
            theirs = fields.get("datapath")
            if other != name and theirs and (library / theirs).resolve() == data:
                raise UsageError(f"{where}: DataPath {path} is the data of the module {other} "
                                 f"({other_conf}), not of {name}; refusing to read it as {name}")
    return root / data.relative_to(library)  # in the library's own spelling (a relative root)


def digests(module: Module) -> dict[str, str]:
    """{path relative to the library: sha256} of the module's files (what is read)."""
    return {str(f.relative_to(module.root)): file_sha256(f) for f in module.files}


def read_modules(modules: list[Module], cache_dir: Path,
                 reader: Callable[[Module], Verses] | None = None,
                 sums: list[dict[str, str]] | None = None) -> list[Verses]:
    """The verses of each module in ``modules``, in order: a cached one from its cache (digests
    matching), the others read by ``reader`` (pysword's, by default) in up to one process a
    core, then cached. ``sums``: each module's ``digests`` where the caller has them already
    (computed here otherwise)."""
    if sums is None:
        sums = [digests(module) for module in modules]
    found = [cached(cache_dir / f"{m.name}.json", s) for m, s in zip(modules, sums, strict=True)]
    missing = [i for i, verses in enumerate(found) if verses is None]
    if missing:
        workers = min(len(missing), len(os.sched_getaffinity(0)))
        # spawned, not forked: a fork of a process running torch's threads may hang
        with ProcessPoolExecutor(workers, multiprocessing.get_context("spawn")) as pool:
            read = pool.map(reader or _read_pysword, [modules[i] for i in missing])
            for i, verses in zip(missing, read, strict=True):
                found[i] = verses
                write_cache(cache_dir / f"{modules[i].name}.json", sums[i], verses)
    return found


def _read_pysword(module: Module) -> Verses:
    """The module read by pysword from the data directory resolved here (pysword's own lookup
    by name would take whichever .conf of the library names it last)."""
    from pysword.bible import SwordBible  # optional: only ``data bible`` needs it

    bible = SwordBible(str(module.data), "ztext", module.versification, "utf-8",
                       module.source_type, module.block_type, "ZIP", None)
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
