"""A real parallel corpus with no download: the Bible in Spanish (Reina-Valera 1909) and English
(King James), public domain, from Debian's SWORD modules, split by whole books.

``bible(out, "spa", "eng")`` writes ``train.tsv``, ``dev.tsv`` (Ruth, Esther, Philippians) and
``test.tsv`` (Mark, John): 'source<TAB>target' lines in canonical verse order, and
``manifest.json`` (counts, module files' sha256, dropped chapters, cleaning rules). When the
target is English and the World English Bible is installed, ``test.tsv`` has a third column:
its text of the same verse, a second reference ('' where it has none or its chapter does
not align with the King James one); without it, the manifest says which package to install. Parallel
passages repeat verses (Kings / Chronicles, the Gospels), so the split is by book, never at random.

Alignment: both modules use KJV versification, but at places where RV1909 has no verse of
its own it keeps its own numbering, so the rest of that chapter, or the next one, is shifted
by 1-5 verses. A shift can only start at an empty verse, so the chapters that hold one or
follow one are tested (``aligned``): kept only if pairing verse i with verse i matches the
verses' lengths clearly better than any shift of 1-5 does; the others are dropped (listed in
the manifest with the shift that fitted best).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import file_sha256, write_atomic
from decoderkit.training.seq2seq.bible_modules import MODULES, check_distinct, check_places, \
    corpus_modules
from decoderkit.training.seq2seq.sword import SWORD_DIR, Verses, digests, read_modules

DEV_BOOKS, TEST_BOOKS = ("Ruth", "Esth", "Phil"), ("Mark", "John")  # OSIS names
TRAIN, DEV, TEST, MANIFEST, CACHE = "train.tsv", "dev.tsv", "test.tsv", "manifest.json", "cache"
SHIFTS = range(1, 6)  # the verse shifts a suspect chapter is tested against, both ways
MARGIN = 0.8  # a chapter is aligned if its unshifted length mismatch < MARGIN x any shift's
RULES = (
    "pysword's OSIS cleaner: markup, Strong's numbers, notes and headings removed",
    "whitespace runs collapsed to one space, ends stripped",
    "the pilcrow '¶' (KJV's paragraph mark) removed",
    "leftover '\\nd ' markup (KJV, before LORD / GOD / JEHOVAH) removed",
    "a word in capitals opening a chapter (RV1909's first word, or the word after a "
    "one-letter first word) spelled as the module spells it most often elsewhere, first "
    "letter upper case when it opens the verse",
    "a pair with either side empty dropped",
    "chapters with or after an empty verse kept only if their verse lengths fit unshifted "
    f"clearly better (mismatch < {MARGIN} x) than shifted by 1-5 verses; else dropped",
)
CAPS = re.compile(r"^([¿¡(\"“]*)(?:([A-ZÁÉÍÓÚÑ]) )?([A-ZÁÉÍÓÚÑÜ]{2,})(?![\w])")
WORD = re.compile(r"\w+")


def bible(out: str | Path, src: str, tgt: str, sword_dir: str | Path = SWORD_DIR) -> dict:
    """Write the corpus for ``src`` -> ``tgt`` into ``out`` (see the module docstring); a
    second run with the same modules reuses the files. Returns the manifest."""
    for flag, lang in (("--src", src), ("--tgt", tgt)):
        if lang not in MODULES:
            raise UsageError(f"{flag} must be one of {', '.join(MODULES)}, got {lang!r}")
    if src == tgt:
        raise UsageError(f"--src and --tgt must differ, got {src!r} for both")
    out, sword_dir = Path(out), Path(sword_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a directory")
    modules, missing = corpus_modules(sword_dir, src, tgt)
    sums = {role: digests(module) for role, module in modules.items()}  # the files read
    check_distinct(modules, sums)
    reused = _reusable(out, src, tgt, sums)
    if reused is not None:
        return reused
    read = dict(zip(modules, read_modules(list(modules.values()), out / CACHE,
                                          sums=list(sums.values())), strict=True))
    check_places((modules[src], read[src]), (modules[tgt], read[tgt]), out / CACHE)
    texts = {src: clean_module(read[src]), tgt: clean_module(read[tgt])}
    splits, dropped_chapters, empty = align(texts[src], texts[tgt])
    out.mkdir(parents=True, exist_ok=True)
    reference = modules.get(f"{tgt}-reference")
    second = second_reference(splits[TEST], texts[tgt], clean_module(read[f"{tgt}-reference"])) \
        if reference else None
    manifest = {"src": src, "tgt": tgt,
                "modules": {lang: modules[lang].name for lang in (src, tgt)},
                "module_sha256": sums, "dev_books": DEV_BOOKS, "test_books": TEST_BOOKS,
                "counts": {name: len(pairs) for name, pairs in splits.items()},
                "dropped_empty": empty, "dropped_chapters": dropped_chapters,
                "test_references": _reference_record(reference, missing, second),
                "rules": RULES, "files": {}}
    for name, pairs in splits.items():
        rows = [(s, t, *([second[i]] if name == TEST and second else []))
                for i, (s, t, _) in enumerate(pairs)]
        body = "".join("\t".join(row) + "\n" for row in rows).encode("utf-8")
        write_atomic(out / name, lambda tmp, body=body: tmp.write_bytes(body))
        manifest["files"][name] = file_sha256(out / name)
    text = json.dumps(manifest, indent=1, ensure_ascii=False) + "\n"
    write_atomic(out / MANIFEST, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return manifest


def _reusable(out: Path, src: str, tgt: str, sums: dict) -> dict | None:
    """The manifest of an earlier run with the same request and module files whose outputs are
    unchanged; None if there is none. An earlier run's unchanged outputs for the same
    languages may be rewritten (the modules changed, or a reference module came or went);
    other files there are refused."""
    ours = False
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        ours = (manifest["src"], manifest["tgt"]) == (src, tgt) and \
            all(file_sha256(out / n) == d for n, d in manifest["files"].items())
        if ours and manifest["module_sha256"] == sums:
            return manifest
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for name in () if ours else (TRAIN, DEV, TEST, MANIFEST):
        if (out / name).exists():
            raise UsageError(f"{out / name} exists and is not this command's output for "
                             f"--src {src} --tgt {tgt} with these modules; refusing to "
                             "overwrite it: move it or choose another --out")
    return None


def _reference_record(reference, missing: str | None, second: list[str] | None) -> dict:
    """What the manifest says of test.tsv's references."""
    record = {"columns": 2 + bool(second), "missing": missing}
    if second:
        record |= {"second": reference.name, "verses": sum(bool(t) for t in second),
                   "without": len(second) - sum(bool(t) for t in second)}
    return record


def second_reference(test: list, first: Verses, other: Verses) -> list[str]:
    """For each test pair (source, target, (book, chapter, verse index)): ``other``'s text of
    that verse, '' where it has none or its chapter's verse lengths do not align with the
    target module's (``aligned``, the lengths' log ratio expected 0)."""
    fits: dict[tuple[str, int], bool] = {}
    texts = []
    for _, _, (book, chapter, verse) in test:
        theirs = other.get(book, [])
        theirs = theirs[chapter] if chapter < len(theirs) else []
        key = (book, chapter)
        if key not in fits:
            fits[key] = len(theirs) == len(first[book][chapter]) and \
                aligned(first[book][chapter], theirs, 0.0)
        texts.append(theirs[verse] if fits[key] else "")
    return texts


def clean_module(verses: Verses) -> Verses:
    """Every verse cleaned by ``clean_verse`` (the rules in ``RULES``)."""
    spelled = Counter(w for chapters in verses.values() for chapter in chapters
                      for verse in chapter[1:] for w in WORD.findall(verse))
    usual: dict[str, str] = {}
    for word, _ in spelled.most_common():  # most frequent first: the first seen wins
        usual.setdefault(word.lower(), word)
    return {book: [[clean_verse(v, usual if i == 0 else None) for i, v in enumerate(ch)]
                   for ch in chapters] for book, chapters in verses.items()}


def clean_verse(text: str, usual: dict[str, str] | None = None) -> str:
    """``text`` cleaned; ``usual`` (lower case -> usual spelling) only for a chapter's opening
    verse, whose capitalised word it respells."""
    text = re.sub(r"\s+", " ", text.replace("¶", "").replace("\\nd ", "")).strip()
    match = CAPS.match(text) if usual is not None else None
    if match:
        lead, letter, word = match.groups()
        spelled = usual.get(word.lower(), word.lower())
        if not letter:
            spelled = spelled[0].upper() + spelled[1:]
        text = f"{lead}{letter + ' ' if letter else ''}{spelled}{text[match.end():]}"
    return text


def align(src: Verses, tgt: Verses) -> tuple[dict, list, int]:
    """({file name: [(source, target, (book, chapter index, verse index))]}, dropped chapters,
    pairs dropped for an empty side)."""
    ratio = statistics.median(math.log(len(t) / len(s)) for book in src
                              for sc, tc in zip(src[book], tgt[book], strict=True)
                              for s, t in zip(sc, tc, strict=True) if s and t)
    splits: dict[str, list] = {TRAIN: [], DEV: [], TEST: []}
    dropped, empty = [], 0
    for book, chapters in src.items():
        name = DEV if book in DEV_BOOKS else TEST if book in TEST_BOOKS else TRAIN
        suspect = False  # this chapter or the one before has an empty verse
        for number, (sc, tc) in enumerate(zip(chapters, tgt[book], strict=True), 1):
            holes = not all(sc) or not all(tc)
            if (suspect or holes) and not aligned(sc, tc, ratio):
                dropped.append({"book": book, "chapter": number, "verses": len(sc),
                                "best_shift": best_shift(sc, tc, ratio)})
            else:
                pairs = [(s, t, (book, number - 1, i))
                         for i, (s, t) in enumerate(zip(sc, tc, strict=True)) if s and t]
                empty += len(sc) - len(pairs)
                splits[name] += pairs
            suspect = holes
    return splits, dropped, empty


def mismatch(src: list[str], tgt: list[str], shift: int, ratio: float) -> float:
    """Mean |log(len(target verse i + shift) / len(source verse i)) - ratio| over the
    non-empty pairs (inf if fewer than 3)."""
    gaps = [abs(math.log(len(tgt[i + shift]) / len(s)) - ratio) for i, s in enumerate(src)
            if 0 <= i + shift < len(tgt) and s and tgt[i + shift]]
    return sum(gaps) / len(gaps) if len(gaps) >= 3 else math.inf


def aligned(src: list[str], tgt: list[str], ratio: float) -> bool:
    """True if verse i <-> verse i fits the lengths clearly better than every shift."""
    others = min(mismatch(src, tgt, s, ratio) for k in SHIFTS for s in (k, -k))
    return mismatch(src, tgt, 0, ratio) < MARGIN * others


def best_shift(src: list[str], tgt: list[str], ratio: float) -> int:
    """The shift (-5..5) whose pairing fits the verse lengths best."""
    return min(range(-SHIFTS[-1], SHIFTS[-1] + 1), key=lambda s: mismatch(src, tgt, s, ratio))
