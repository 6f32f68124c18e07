"""benchmarks/README.md is a dashboard: a table of goals for every benchmark script (a file of
benchmarks/ with ``if __name__ == "__main__":``) and for the demos, each row with its date, its
CPU (one of the legend's), its load and a commit; the dated runs are in benchmarks/log/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from decoderkit.cli.bench import is_script

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "benchmarks" / "README.md"
COLUMNS = ["goal", "ours", "peer", "ratio", "met", "date", "CPU", "load", "commit"]
NEWEST = "Zen 4"


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def sections(text: str) -> dict[str, list[str]]:
    """The dashboard's ``## `` sections (up to "How to run"): heading -> its lines."""
    found, current = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            if current.lower().startswith("how to run"):
                break
            found[current] = []
        elif current is not None:
            found[current].append(line)
    return found


def goal_rows(lines: list[str]) -> list[list[str]]:
    """The rows of a section's goal table (its header is COLUMNS), or [] if it has none."""
    rows, inside = [], False
    for line in lines:
        if not line.startswith("|"):
            inside = False
            continue
        row = cells(line)
        if row == COLUMNS:
            inside = True
        elif inside and not set("".join(row)) <= set("-: "):
            rows.append(row)
    return rows


def legend(text: str) -> list[str]:
    """The CPU labels of the "CPUs" table (its first column)."""
    rows = [cells(line) for line in sections(text)["CPUs"] if line.startswith("|")]
    return [row[0] for row in rows[2:]]


def scripts() -> list[str]:
    return sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")
                  if is_script(ast.parse(p.read_text(encoding="utf-8"))))


def test_every_benchmark_script_has_a_goal_table():
    text = DASHBOARD.read_text(encoding="utf-8")
    tables = {heading: goal_rows(lines) for heading, lines in sections(text).items()}
    names = scripts()
    assert len(names) >= 9, names  # the finder found the scripts
    missing = [name for name in names
               if not any(f"`{name}`" in heading and rows for heading, rows in tables.items())]
    assert not missing, (f"benchmarks/README.md has no goal table for {missing}: add a "
                         f"'## ... (`NAME.py`)' section with a table headed {COLUMNS}")
    assert tables.get("The demos"), "benchmarks/README.md has no goal table of the demos"


def test_every_row_names_its_date_cpu_load_and_commit():
    text = DASHBOARD.read_text(encoding="utf-8")
    cpus = legend(text)
    assert NEWEST in cpus and len(cpus) >= 3, cpus
    rows = [(heading, row) for heading, lines in sections(text).items()
            for row in goal_rows(lines)]
    assert len(rows) >= 40, len(rows)
    bad = []
    for heading, row in rows:
        if len(row) != len(COLUMNS):
            bad.append((heading, row[0], f"{len(row)} cells, not {len(COLUMNS)}"))
            continue
        got = dict(zip(COLUMNS, row, strict=True))
        if not re.search(r"\b\d{4}-\d\d-\d\d\b", got["date"]):
            bad.append((heading, got["goal"], f"no date: {got['date']!r}"))
        cpu = next((c for c in sorted(cpus, key=len, reverse=True)
                    if got["CPU"].startswith(c)), None)
        if cpu is None:
            bad.append((heading, got["goal"], f"CPU {got['CPU']!r} is not in the legend"))
        elif cpu != NEWEST and "other CPU" not in got["CPU"]:
            bad.append((heading, got["goal"], f"{cpu} is not the newest CPU: say 'other CPU'"))
        if not got["load"]:
            bad.append((heading, got["goal"], "no load (write 'not recorded')"))
        if not re.search(r"`[0-9a-f]{7,40}`", got["commit"]):
            bad.append((heading, got["goal"], f"no commit: {got['commit']!r}"))
    assert not bad, "benchmarks/README.md rows lacking what every row names:\n" + \
        "\n".join(map(str, bad))


def test_the_dashboard_points_to_every_log_file():
    text = DASHBOARD.read_text(encoding="utf-8")
    logs = sorted((ROOT / "benchmarks" / "log").glob("*.md"))
    assert logs, "benchmarks/log/ holds the dated runs"
    missing = [p.name for p in logs if f"(log/{p.name})" not in text]
    assert not missing, f"benchmarks/README.md links no {missing}"
    for log in logs:
        assert re.fullmatch(r"\d{4}-\d\d\.md", log.name), f"{log.name}: name a log YYYY-MM.md"
