"""Built-in character-level tasks, generated locally from a seed (no download).

``copy``, ``reverse`` and ``sort`` map a random lower-case string to itself, its reverse and its
sorted characters. ``dates`` maps a date written one of the many ways people write dates
("Sunday, 29 November 2026", "11/29/26", "29.11.2026", "nov 29th 2026", ...) to ISO
"2026-11-29". Held-out examples use keys (strings, dates) never seen in training.
"""

from __future__ import annotations

import datetime as dt
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

from decoderkit.base.errors import UsageError

FIRST_DAY, DAYS = dt.date(2000, 1, 1), 36525  # 2000-01-01 .. 2099-12-31: 'yy' is 20yy
LETTERS = string.ascii_lowercase


@dataclass(frozen=True)
class Task:
    """A task: draw a key, write it as a (source, target) text pair."""

    key: Callable[[random.Random], object]  # a random key (string or date)
    render: Callable[[object, random.Random], tuple[str, str]]  # key -> (src, tgt)
    src_alphabet: str  # every character a source may contain
    tgt_alphabet: str  # every character a target may contain


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _month(d: dt.date) -> str:  # English whatever the locale (strftime's %B is not)
    return MONTHS[d.month - 1]


def _weekday(d: dt.date) -> str:
    return WEEKDAYS[d.weekday()]


DATE_FORMATS: tuple[Callable[[dt.date], str], ...] = (
    lambda d: f"{_weekday(d)}, {d.day} {_month(d)} {d.year}",     # Sunday, 29 November 2026
    lambda d: f"{d.day} {_month(d)} {d.year}",                    # 29 November 2026
    lambda d: f"{d.day} {_month(d)[:3]} {d.year}",                # 29 Nov 2026
    lambda d: f"{_month(d)} {d.day}, {d.year}",                   # November 29, 2026
    lambda d: f"{_month(d)[:3]} {d.day}, {d.year}",               # Nov 29, 2026
    lambda d: f"{d.month:02}/{d.day:02}/{d.year % 100:02}",       # 11/29/26
    lambda d: f"{d.month}/{d.day}/{d.year}",                      # 11/29/2026
    lambda d: f"{d.day:02}.{d.month:02}.{d.year}",                # 29.11.2026
    lambda d: f"{_month(d)[:3].lower()} {_ordinal(d.day)} {d.year}",  # nov 29th 2026
    lambda d: f"{_ordinal(d.day)} of {_month(d)} {d.year}",       # 29th of November 2026
    lambda d: f"{_weekday(d)[:3]} {d.day} {_month(d)[:3]} {d.year}",  # Sun 29 Nov 2026
    lambda d: f"{_month(d).upper()} {d.day}, {d.year}",           # NOVEMBER 29, 2026
    lambda d: f"{d.year}/{d.month:02}/{d.day:02}",                # 2026/11/29
    lambda d: f"{d.day}-{_month(d)[:3]}-{d.year}",                # 29-Nov-2026
    lambda d: f"{_weekday(d)} {_month(d)} {_ordinal(d.day)}, {d.year}",  # Sunday November 29th, ...
)


def _random_string(rng: random.Random) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 10)))


def _random_date(rng: random.Random) -> dt.date:
    return FIRST_DAY + dt.timedelta(days=rng.randrange(DAYS))


def _render_date(day: dt.date, rng: random.Random) -> tuple[str, str]:
    return rng.choice(DATE_FORMATS)(day), day.isoformat()


TASKS: dict[str, Task] = {
    "copy": Task(_random_string, lambda s, rng: (s, s), LETTERS, LETTERS),
    "reverse": Task(_random_string, lambda s, rng: (s, s[::-1]), LETTERS, LETTERS),
    "sort": Task(_random_string, lambda s, rng: (s, "".join(sorted(s))), LETTERS, LETTERS),
    "dates": Task(_random_date, _render_date, string.ascii_letters + string.digits + " ,./-",
                  string.digits + "-"),
}


def get_task(name: str) -> Task:
    """The built-in task ``name``; an unknown name raises ``ValueError`` listing the choices."""
    if name not in TASKS:
        raise UsageError(f"unknown task {name!r}; choose one of {sorted(TASKS)}")
    return TASKS[name]


def task_pairs(name: str, n_train: int, n_valid: int,
               seed: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train, valid) text pairs; no valid key (string or date) occurs in train."""
    task = get_task(name)
    for arg, value in (("n_train", n_train), ("n_valid", n_valid)):
        if not isinstance(value, int) or value < 1:
            raise UsageError(f"{arg} must be a positive int, got {value!r}")
    rng = random.Random(seed)
    held: set = set()
    for _ in range(100 * n_valid):
        if len(held) == n_valid:
            break
        held.add(task.key(rng))
    held_keys = sorted(held)  # set order is not reproducible for str keys; sort it
    valid = [task.render(k, rng) for k in held_keys]
    rng.shuffle(valid)
    train = []
    while len(train) < n_train:
        key = task.key(rng)
        if key not in held:
            train.append(task.render(key, rng))
    return train, valid
