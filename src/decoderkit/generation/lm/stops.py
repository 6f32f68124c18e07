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
from decoderkit.text.lm.tokenizer import LMTokenizer

UNFINISHED = "\ufffd"  # what decoding a cut multi-byte character ends in
DECODE_CONTEXT = 4  # ids decoded before a window, for decoders that spell a token by its neighbour
DECODE_WINDOW = 8  # unfinished ids at most, beyond which the window is made final where it can be

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
    text ends before it); ``kept``: how many ids lie wholly before the end of the text.

    Each push decodes a bounded window, not the whole sequence: the ids since the text was
    last final (no unfinished character at its end), after ``DECODE_CONTEXT`` ids before them
    (a decoder may spell a token by its neighbour, as SentencePiece's leading space), whose
    own text is cut off. A window still unfinished after ``DECODE_WINDOW`` ids (bytes that
    never make a character) is made final up to an id where decoding it in two parts gives
    the same text. The text is what decoding every id at each push gives.
    """

    def __init__(self, decode: Decode, stops: Sequence[str] = ()):
        self.decode, self.stops = decode, check_stops(stops)
        self.ids: list[int] = []
        self.ends: list[int] = []  # the settled text's length after each id
        self.fixed = ""  # the text of ids[:self.final], final whatever comes next
        self.final = 0  # ids whose text is ``fixed``
        self.fixed_settled = 0  # len(fixed) without its trailing unfinished characters
        self.pending = ""  # the text of ids[self.final:]
        self.shown = 0  # characters of ``text`` released
        self.stopped = False
        self.decoded = 0  # ids decoded so far, all pushes together (the tests read it)

    @property
    def text(self) -> str:
        """The final text so far (released or held back)."""
        return self.fixed + self.pending

    @property
    def kept(self) -> int:
        """Ids whose text is wholly inside the final text (all of them until a stop)."""
        if not self.stopped:
            return len(self.ids)
        length = len(self.fixed) + len(self.pending)
        return sum(1 for end in self.ends if end <= length)

    def push(self, token: int) -> str:
        """Add one id; the text that is now final and safe to show."""
        if self.stopped:
            raise ValueError("push after a stop sequence ended the text")
        self.ids.append(token)
        self.pending = self._piece(self.final, len(self.ids))
        cut = self._first_stop()
        if cut is not None:
            self.ends.append(len(self.fixed) + len(self.pending))
            self.stopped = True
            self.pending = self.pending[:cut - len(self.fixed)] if cut >= len(self.fixed) \
                else self._cut_fixed(cut)
            return self._release(len(self.fixed) + len(self.pending))
        settled = self._settled()
        self.ends.append(settled)
        release = self._release(settled - self._open_prefix(settled))
        self._make_final()
        return release

    def flush(self) -> str:
        """Whatever is held back (an unfinished character as U+FFFD, a partial stop)."""
        return self._release(len(self.fixed) + len(self.pending))

    def _piece(self, start: int, end: int) -> str:
        """The text of ids[start:end] within the whole text, decoding a window of them."""
        before = max(0, start - DECODE_CONTEXT)
        window = self.decode(self.ids[before:end])
        self.decoded += end - before
        if before == start:
            return window
        context = self.decode(self.ids[before:start])
        self.decoded += start - before
        if window.startswith(context):
            return window[len(context):]
        whole = self.decode(self.ids[:end])  # a decoder that respells its context
        self.decoded += end
        return whole[len(self.decode(self.ids[:start])):]

    def _settled(self) -> int:
        pending = self.pending.rstrip(UNFINISHED)
        return len(self.fixed) + len(pending) if pending else self.fixed_settled

    def _make_final(self) -> None:
        """Move the pending text into ``fixed`` where nothing to come can change it."""
        n = len(self.ids)
        if not self.pending.endswith(UNFINISHED):
            return self._fix(n, self.pending)
        if n - self.final <= DECODE_WINDOW:
            return None
        for j in range(n - 3, self.final, -1):  # an unfinished character spans <= 3 bytes
            head, tail = self._piece(self.final, j), self._piece(j, n)
            if head + tail == self.pending:
                self._fix(j, head)
                self.pending = tail
                return None
        return None

    def _fix(self, upto: int, piece: str) -> None:
        kept = piece.rstrip(UNFINISHED)
        self.fixed_settled = len(self.fixed) + len(kept) if kept else self.fixed_settled
        self.fixed += piece
        self.final = upto
        self.pending = ""

    def _cut_fixed(self, cut: int) -> str:
        self.fixed = self.fixed[:cut]
        return ""

    def _release(self, upto: int) -> str:
        upto = max(upto, self.shown)
        piece = self._slice(self.shown, upto)
        self.shown = upto
        return piece

    def _slice(self, start: int, end: int) -> str:
        """text[start:end] without building ``text``."""
        n = len(self.fixed)
        return self.fixed[start:end] + self.pending[max(0, start - n):max(0, end - n)]

    def _first_stop(self) -> int | None:
        """Where the earliest stop sequence starts in the text (None: nowhere)."""
        start = max(0, self.shown - max((len(s) for s in self.stops), default=0))
        if not self.stops:
            return None
        tail = self._slice(start, len(self.fixed) + len(self.pending))
        found = [i for i in (tail.find(s) for s in self.stops) if i >= 0]
        return start + min(found) if found else None

    def _open_prefix(self, settled: int) -> int:
        """The length of the longest end of text[:settled] that begins some stop sequence."""
        longest = 0
        for s in self.stops:
            end = self._slice(max(0, settled - len(s) + 1), settled)
            for n in range(min(len(s) - 1, len(end)), longest, -1):
                if end.endswith(s[:n]):
                    longest = n
                    break
        return longest


class TextStream(StopText):
    """The text of ids as they come, piece by piece: ``push(id)`` returns what can be printed
    now (a multi-byte character cut across byte-level tokens waits for its last byte), and
    none of a ``stops`` sequence (``StopText``)."""

    def __init__(self, tokenizer: LMTokenizer, stops: Sequence[str] = ()):
        super().__init__(tokenizer.decode, stops)
        self.tokenizer = tokenizer
