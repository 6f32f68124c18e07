"""The SWORD modules of the Bible corpus, checked for what they really are before any is read
or trusted: each installed module's .conf and files (``sword.open_module``: damage named), its
language (the .conf's ``Lang`` and what its text is: the commonest words of each language
counted), no two of them the same text, source and target of one versification; after the
reading, source and target with the same places (a cache could say otherwise)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.training.seq2seq.sword import Module, Verses, installed, not_installed, \
    open_module

# language code -> (SWORD module, Debian package)
MODULES = {"eng": ("engKJV2006eb", "sword-text-kjv"), "spa": ("spaRV1909eb", "sword-text-sparv")}
# a second test reference per target language: (SWORD module, Debian package)
REFERENCES = {"eng": ("engWEB2015eb", "sword-text-web")}
# language code -> (its name, its SWORD Lang codes, words common in its Bible text that the
# other languages here do not use)
LANGUAGES = {
    "eng": ("English", ("en", "eng"), frozenset(
        "the and of that to shall unto he his they in for him be is with them was which it my "
        "their all thou thy".split())),
    "spa": ("Spanish", ("es", "spa"), frozenset(
        "de y que el la los en las se por su del con al lo le sus para mi como es".split())),
}
SHARE = 0.15  # a text is in a language if these words are >= 15% of it, 3x any other's share
MARKUP = re.compile(r"<[^>]*>")
WORD = re.compile(r"\w+")


def corpus_modules(sword_dir: Path, src: str, tgt: str) -> tuple[dict[str, Module], str | None]:
    """({src, tgt and, if installed, 'TGT-reference': its module, checked}, the line saying what
    to install for a second reference when it is not)."""
    modules = {lang: open_module(sword_dir, *MODULES[lang]) for lang in (src, tgt)}
    langs = {src: src, tgt: tgt}
    missing = None
    if tgt in REFERENCES and installed(sword_dir, REFERENCES[tgt][0]):
        modules[f"{tgt}-reference"] = open_module(sword_dir, *REFERENCES[tgt])
        langs[f"{tgt}-reference"] = tgt
    elif tgt in REFERENCES:
        missing = f"{not_installed(sword_dir, *REFERENCES[tgt])}; test.tsv has one reference"
    for role, module in modules.items():
        check_language(module, langs[role], module.texts())
    if modules[src].versification != modules[tgt].versification:
        raise UsageError(f"the SWORD modules {modules[src].name} (--src) and "
                         f"{modules[tgt].name} (--tgt) have the versifications "
                         f"{modules[src].versification} and {modules[tgt].versification}: "
                         "pairing verse by verse needs one")
    return modules, missing


def check_language(module: Module, lang: str, texts: list[str]) -> None:
    """Refuse ``module`` for language ``lang`` unless its .conf's Lang says so and its
    ``texts`` are in it (``SHARE``), naming the module and its data directory."""
    name, codes, _ = LANGUAGES[lang]
    said = module.lang or "en"  # SWORD's default
    if said.split("-")[0].lower() not in codes:
        raise UsageError(f"the SWORD module {module.name} ({module.conf}) has Lang={said}, not "
                         f"{name} ({lang})")
    words = Counter(w.lower() for text in texts[::16] for w in WORD.findall(MARKUP.sub(" ", text)))
    total = sum(words.values()) or 1
    shares = {code: sum(words[w] for w in common) / total
              for code, (_, _, common) in LANGUAGES.items()}
    other = max((code for code in shares if code != lang), key=shares.get)
    if shares[lang] < SHARE or shares[lang] < 3 * shares[other]:
        raise UsageError(f"the SWORD module {module.name}'s text ({module.data}) is not {name}: "
                         f"common {name} words are {shares[lang]:.1%} of it, common "
                         f"{LANGUAGES[other][0]} ones {shares[other]:.1%}")


def check_distinct(modules: dict[str, Module], sums: dict[str, dict[str, str]]) -> None:
    """Refuse two modules of the corpus whose data files are the same bytes (``sums``: each
    one's digests, the .conf first)."""
    seen: dict[tuple, Module] = {}
    for role, module in modules.items():
        data = tuple(list(sums[role].values())[1:])
        if data in seen:
            raise UsageError(f"the SWORD modules {seen[data].name} and {module.name} hold the "
                             f"same text ({seen[data].data}, {module.data}): one is another "
                             "module's copy")
        seen[data] = module


def check_places(first: tuple[Module, Verses], second: tuple[Module, Verses],
                 cache: Path) -> None:
    """Refuse two readings (of one versification) whose books or verse counts differ: what
    pairing verse by verse assumes; only a damaged cache can make them differ."""
    (a, ours), (b, theirs) = first, second
    for book in ours.keys() | theirs.keys():
        counts = [[len(c) for c in verses.get(book, [])] for verses in (ours, theirs)]
        if counts[0] != counts[1]:
            raise UsageError(f"the readings of {a.name} and {b.name} differ in {book} (verses "
                             f"per chapter {counts[0]} and {counts[1]}) though both are "
                             f"{a.versification}: a cache in {cache} is damaged; delete it "
                             "and run again")
