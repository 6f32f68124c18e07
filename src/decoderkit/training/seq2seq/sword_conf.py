"""A SWORD module's ``.conf`` read as SWORD writes it (``[Name]`` sections of ``Key=Value``
lines, ``#`` comments) and its settings checked against what ``data bible`` reads: zText
modules, ZIP blocks, UTF-8 text, not enciphered, a versification pysword knows. A .conf is a
foreign file: read only if regular and small, each refusal one line naming it and the key."""

from __future__ import annotations

from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.text import read_file

CONF_BYTES = 1 << 20  # the most a .conf may hold (Debian's: under 8 KB)
BLOCK_TYPES = ("BOOK", "CHAPTER", "VERSE")


def conf_sections(path: Path, what: str) -> dict[str, dict[str, str]]:
    """{module name: {key in lower case: value}} of every section of the .conf ``path``
    (UTF-8, or Latin-1 as SWORD allows); a line without '=' continues the previous value."""
    data = read_file(path, what, CONF_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    sections: dict[str, dict[str, str]] = {}
    fields, key = None, ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#") or not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            fields, key = sections.setdefault(line[1:-1], {}), ""
        elif fields is not None and "=" in line:
            key, value = (s.strip() for s in line.split("=", 1))
            key = key.lower()
            fields[key] = value
        elif fields is not None and key:
            fields[key] += "\n" + line
    return sections


def settings(fields: dict[str, str], where: str) -> dict[str, str]:
    """The settings the reading needs (``lang``, ``versification``, ``block_type``,
    ``sourcetype``), SWORD's defaults filled in; a module in a form not read here is one line
    naming ``where`` (the module and its .conf), the key and its value."""
    from pysword.canons import canons

    def setting(key: str, default: str, allowed, label: str) -> str:
        value = fields.get(key.lower(), default)
        if value.lower() not in allowed:
            raise UsageError(f"{where} has {key}={value}: only {label} are read")
        return value

    setting("ModDrv", "", ("ztext",), "zText modules")
    setting("CompressType", "ZIP", ("zip",), "ZIP-compressed modules")
    setting("Encoding", "UTF-8", ("utf-8", "utf8"), "UTF-8 modules")
    setting("CipherKey", "", ("",), "unenciphered modules")
    versification = setting("Versification", "KJV", tuple(canons),
                            f"the versifications pysword knows ({', '.join(sorted(canons))})")
    block_type = setting("BlockType", "BOOK", tuple(b.lower() for b in BLOCK_TYPES),
                         f"{'/'.join(BLOCK_TYPES)} blocks")
    return {"lang": fields.get("lang", ""), "versification": versification.lower(),
            "block_type": block_type.upper(), "sourcetype": fields.get("sourcetype", "OSIS")}
