"""Generated text as it becomes final, and stop sequences that never reach it.

``StopText(decode, stops)`` takes the generated ids one at a time and releases text only once
it is settled: never the tail that could still grow into a stop sequence (so a stop spanning
several tokens is never shown in part), never a multi-byte character cut across byte-level
tokens (decoded as U+FFFD until its last byte comes). When a stop sequence appears the text
ends just before it. The released pieces concatenate to the final text, whatever the tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from decoderkit.base.errors import UsageError

UNFINISHED = "\ufffd"  # what decoding a cut multi-byte character ends in

Decode = Callable[[list[int]], str]


def check_stops(stops: Sequence[str], name: str = "stop") -> tuple[str, ...]:
    """The stop sequences as a tuple of non-empty strings, else a UsageError naming them."""
    if isinstance(stops, str):
        stops = (stops,)
    stops = tuple(stops)
    for i, s in enumerate(stops):
        if not isinstance(s, str) or not s:
            raise UsageError(f"{name}[{i}] must be a non-empty string, got {s!r}")
    return stops


class StopText:
    """Ids in, settled text out: ``push(id)`` returns the newly settled piece (may be "");
    ``flush()`` the rest once generation ends. ``stopped``: a stop sequence was found (the
    text ends before it); ``kept``: how many ids lie wholly before the end of the text."""

    def __init__(self, decode: Decode, stops: Sequence[str] = ()):
        self.decode, self.stops = decode, check_stops(stops)
        self.ids: list[int] = []
        self.ends: list[int] = []  # the settled text's length after each id
        self.text = ""  # the final text so far (released or held back)
        self.shown = 0  # characters of ``text`` released
        self.stopped = False

    @property
    def kept(self) -> int:
        """Ids whose text is wholly inside the final text (all of them until a stop)."""
        if not self.stopped:
            return len(self.ids)
        return sum(1 for end in self.ends if end <= len(self.text))

    def push(self, token: int) -> str:
        """Add one id; the text that is now final and safe to show."""
        if self.stopped:
            raise ValueError("push after a stop sequence ended the text")
        self.ids.append(token)
        text = self.decode(self.ids)
        cut = self._first_stop(text)
        if cut is not None:
            self.stopped, self.text = True, text[:cut]
            self.ends.append(len(text))
            return self._release(len(self.text))
        self.text = text
        settled = len(text.rstrip(UNFINISHED))
        self.ends.append(settled)
        return self._release(settled - self._open_prefix(text[:settled]))

    def flush(self) -> str:
        """Whatever is held back (an unfinished character as U+FFFD, a partial stop)."""
        return self._release(len(self.text))

    def _release(self, upto: int) -> str:
        upto = max(upto, self.shown)
        piece, self.shown = self.text[self.shown:upto], upto
        return piece

    def _first_stop(self, text: str) -> int | None:
        """Where the earliest stop sequence starts in ``text`` (None: nowhere)."""
        start = max(0, self.shown - max((len(s) for s in self.stops), default=0))
        found = [i for i in (text.find(s, start) for s in self.stops) if i >= 0]
        return min(found) if found else None

    def _open_prefix(self, text: str) -> int:
        """The length of the longest end of ``text`` that begins some stop sequence."""
        longest = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), longest, -1):
                if text.endswith(s[:n]):
                    longest = n
                    break
        return longest
