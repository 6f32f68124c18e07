"""The built-in tasks: correct targets, seeded, held-out keys unseen in training."""

import datetime as dt
import random
import re

import pytest

from decoderkit.training.seq2seq.tasks import DATE_FORMATS, get_task, task_pairs

STRPTIME = ("%A %d %B %Y", "%d %B %Y", "%d %b %Y", "%B %d %Y", "%b %d %Y", "%m/%d/%y",
            "%m/%d/%Y", "%d.%m.%Y", "%a %d %b %Y", "%Y/%m/%d", "%d-%b-%Y", "%A %B %d %Y")


def independent_parse(text: str) -> dt.date:
    """Read a written date back with the standard library's strptime (C locale names)."""
    text = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", text.replace(",", "")).replace(" of ", " ")
    found = set()
    for pattern in STRPTIME:
        try:
            day = dt.datetime.strptime(text, pattern).date()
        except ValueError:
            continue
        if "%y" in pattern:  # the task's convention: 'yy' is 20yy (strptime pivots at 69)
            day = day.replace(year=2000 + day.year % 100)
        found.add(day)
    assert len(found) == 1, (text, found)
    return found.pop()


def test_every_date_format_reads_back_to_the_same_date():
    d = dt.date(2026, 11, 29)
    written = [f(d) for f in DATE_FORMATS]
    for seed_example in ("Sunday, 29 November 2026", "11/29/26", "29.11.2026",
                         "nov 29th 2026"):
        assert seed_example in written
    assert len(set(written)) == len(written)
    rng = random.Random(0)
    days = [dt.date(2000, 1, 1), dt.date(2099, 12, 31), dt.date(2024, 2, 29)]
    days += [dt.date(2000, 1, 1) + dt.timedelta(days=rng.randrange(36525)) for _ in range(40)]
    for day in days:
        for f in DATE_FORMATS:
            assert independent_parse(f(day)) == day, f(day)


def test_dates_task_targets_are_iso_and_held_out_dates_are_unseen():
    train, valid = task_pairs("dates", 3000, 200, seed=5)
    assert len(train) == 3000 and len(valid) == 200
    for _, tgt in train[:50] + valid[:50]:
        assert dt.date.fromisoformat(tgt).isoformat() == tgt
    assert not {t for _, t in valid} & {t for _, t in train}
    assert task_pairs("dates", 3000, 200, seed=5) == (train, valid)
    assert task_pairs("dates", 3000, 200, seed=6) != (train, valid)


@pytest.mark.parametrize("name, rule", [("copy", lambda s: s), ("reverse", lambda s: s[::-1]),
                                        ("sort", lambda s: "".join(sorted(s)))])
def test_string_tasks(name, rule):
    train, valid = task_pairs(name, 200, 20, seed=0)
    assert all(t == rule(s) for s, t in train + valid)
    assert not {s for s, _ in valid} & {s for s, _ in train}
    alphabet = set(get_task(name).src_alphabet)
    assert all(set(s) <= alphabet for s, _ in train)


def test_unknown_task():
    with pytest.raises(ValueError, match="unknown task 'datez'"):
        get_task("datez")
