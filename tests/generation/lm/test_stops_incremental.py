"""StopText decodes a bounded window at each push, and gives what decoding every id at every
push gives (the reference below, the quadratic original), on a byte-level BPE whose ids cut
characters and on any stops."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoderkit.generation.lm.stops import DECODE_CONTEXT, DECODE_WINDOW, UNFINISHED, StopText
from decoderkit.text.lm.tokenizer import LMTokenizer

TEXT = "Grüße, naïve café — 東京 🙂 fine. " * 8
TOKENIZER = LMTokenizer.train_bpe([TEXT], 300)


class Reference:
    """The original StopText: the whole sequence decoded at every push."""

    def __init__(self, decode, stops=()):
        self.decode, self.stops = decode, tuple(stops)
        self.ids, self.ends, self.text, self.shown, self.stopped = [], [], "", 0, False

    @property
    def kept(self) -> int:
        if not self.stopped:
            return len(self.ids)
        return sum(1 for end in self.ends if end <= len(self.text))

    def push(self, token: int) -> str:
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
        return self._release(len(self.text))

    def _release(self, upto: int) -> str:
        upto = max(upto, self.shown)
        piece, self.shown = self.text[self.shown:upto], upto
        return piece

    def _first_stop(self, text: str):
        start = max(0, self.shown - max((len(s) for s in self.stops), default=0))
        found = [i for i in (text.find(s, start) for s in self.stops) if i >= 0]
        return min(found) if found else None

    def _open_prefix(self, text: str) -> int:
        longest = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), longest, -1):
                if text.endswith(s[:n]):
                    longest = n
                    break
        return longest


def run(make, ids, stops):
    text, pieces = make(TOKENIZER.decode, stops), []
    for i in ids:
        pieces.append(text.push(i))
        if text.stopped:
            break
    pieces.append(text.flush())
    return pieces, text.text, text.kept, text.stopped


IDS = st.lists(st.integers(0, TOKENIZER.vocab_size - 1), max_size=60)
BYTES = st.lists(st.sampled_from([i for i in range(TOKENIZER.vocab_size)  # cut characters
                                  if len(TOKENIZER.hf.id_to_token(i)) == 1]), max_size=60)
STOPS = st.lists(st.text(alphabet="ü, aéï東京🙂\ufffd.e", min_size=1, max_size=4), max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=st.one_of(IDS, BYTES), stops=STOPS)
def test_the_windowed_text_is_the_whole_decodes(ids, stops):
    assert run(StopText, ids, stops) == run(Reference, ids, stops)


def test_each_push_decodes_a_bounded_window_whatever_the_length():
    ids = TOKENIZER.encode(TEXT * 12)
    text = StopText(TOKENIZER.decode, ("never there",))
    per_push = []
    for i in ids:
        before = text.decoded
        text.push(i)
        per_push.append(text.decoded - before)
    assert len(ids) > 400 and text.text == TOKENIZER.decode(ids)
    bound = 2 * (DECODE_CONTEXT + DECODE_WINDOW + 1)
    assert max(per_push) <= bound and max(per_push[-100:]) <= max(per_push[:100])
