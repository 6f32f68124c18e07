"""Sentencepiece tokenizers with a vocabulary file of their own: Marian's (opus-mt).

A Marian directory has ``source.spm`` and ``target.spm`` (sentencepiece models that cut text
into pieces) and ``vocab.json`` (piece -> the model's id; ``target_vocab.json`` when the
target side has its own). The ids are the vocabulary file's, not sentencepiece's own: a piece
missing from it is ``<unk>``. The rules are ``transformers.MarianTokenizer``'s, so the ids are
the same: the special tokens (``</s>``, ``<unk>``, ``<pad>``) written in the text are those
tokens; a leading language code ``>>xx<<`` is one token; a source ends with ``</s>``.

``train_sentencepiece`` learns a model of this kind from a corpus (``decoderkit train
--tokenizer spm`` / ``spm-joint``), with decoderkit's special ids and no EOS added.

``encode`` of a source therefore ends with EOS (Marian models are trained so; decoderkit's own
tokenizers add nothing and batching adds the target's EOS). Saved as one JSON file (the model
bytes in base64 beside the vocabulary), in place of a ``tokenizers`` file.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterable
from pathlib import Path

import sentencepiece

from decoderkit.base.checks import checked_ids
from decoderkit.base.errors import UsageError
from decoderkit.base.files import write_atomic
from decoderkit.base.text import check_text

KIND = "sentencepiece"  # the key that marks a saved file of this kind
WORD = "\u2581"  # sentencepiece's word-start mark
# decoderkit's special pieces at ModelConfig's default ids (pad 0, bos 1, eos 2, unk 3), as
# text.seq2seq.tokenizer.SPECIALS (which imports this module, so they are spelled here)
OUR_SPECIALS = {"pad": "<pad>", "bos": "<bos>", "eos": "<eos>", "unk": "<unk>"}


class SentencePieceTokenizer:
    """Text <-> ids through a sentencepiece model and a piece -> id vocabulary.

    ``add_eos``: ``encode`` appends EOS (a Marian source). ``eos``/``unk``/``pad``: the special
    tokens, each in ``vocab``.
    """

    def __init__(self, model: bytes, vocab: dict[str, int], *, add_eos: bool,
                 eos: str = "</s>", unk: str = "<unk>", pad: str = "<pad>"):
        if not isinstance(vocab, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                for k, v in vocab.items()):
            raise UsageError("a sentencepiece vocabulary must map piece strings to int ids")
        ids = sorted(vocab.values())
        if ids != list(range(len(ids))):
            raise UsageError(f"vocabulary ids must be 0..{len(ids) - 1}, each once")
        for name, token in (("eos", eos), ("unk", unk), ("pad", pad)):
            if token not in vocab:
                raise UsageError(f"the vocabulary has no {name} token {token!r}")
        self.spm = sentencepiece.SentencePieceProcessor()
        try:
            self.spm.LoadFromSerializedProto(model)
        except (RuntimeError, TypeError) as err:
            raise UsageError(f"not a sentencepiece model ({err})") from None
        self.model, self.vocab, self.add_eos = model, dict(vocab), add_eos
        self.eos, self.unk, self.pad = eos, unk, pad
        self.pieces = {i: p for p, i in vocab.items()}  # id -> piece
        self.specials = sorted({eos, unk, pad}, key=len, reverse=True)  # longest first

    @property
    def unk_token(self) -> str:
        """The token unknown text becomes."""
        return self.unk

    @property
    def vocab_size(self) -> int:
        """Number of ids (the model's ``src_vocab`` / ``tgt_vocab``)."""
        return len(self.vocab)

    def _pieces(self, text: str) -> list[str]:
        """MarianTokenizer's tokens: special tokens kept whole, the rest cut by sentencepiece,
        a language code at the start of each stretch one token."""
        out, rest = [], text
        while rest:
            hits = [(rest.find(s), -len(s), s) for s in self.specials if s in rest]
            at, _, special = min(hits) if hits else (len(rest), 0, None)
            out += self._cut(rest[:at])
            if special is None:
                break
            out.append(special)
            rest = rest[at + len(special):]
        return out

    def _cut(self, text: str) -> list[str]:
        if not text:
            return []
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[:end + 2]], text[end + 2:]
        return code + self.spm.encode(text, out_type=str)

    def encode(self, text: str) -> list[int]:
        """Text -> ids (EOS appended when ``add_eos``)."""
        check_text(text)
        unk = self.vocab[self.unk]
        ids = [self.vocab.get(p, unk) for p in self._pieces(text)]
        return ids + [self.vocab[self.eos]] if self.add_eos else ids

    def unknown_characters(self, text: str) -> list[str]:
        """The characters of ``text`` read as ``<unk>``, sorted, each once."""
        return sorted({c for c in set(check_text(text)) if not c.isspace()
                       and any(p not in self.vocab for p in self._cut(c))})

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text; EOS, pad and unk are dropped (MarianTokenizer, skip_special_tokens)."""
        drop = {self.vocab[t] for t in (self.eos, self.unk, self.pad)}
        pieces = [self.pieces[i] for i in self._checked(ids) if i not in drop]
        return self.spm.decode_pieces(pieces).replace(WORD, " ").strip()

    def tokens(self, ids: Iterable[int]) -> list[str]:
        """The piece of every id (specials included)."""
        return [self.pieces[i] for i in self._checked(ids)]

    def _checked(self, ids: Iterable[int]) -> list[int]:
        return checked_ids(ids, self.vocab_size)

    def to_json(self) -> str:
        """The whole tokenizer as one JSON text (what ``save`` writes)."""
        return json.dumps({KIND: {"model": base64.b64encode(self.model).decode("ascii"),
                                  "vocab": self.vocab, "add_eos": self.add_eos, "eos": self.eos,
                                  "unk": self.unk, "pad": self.pad}}, ensure_ascii=False)

    def save(self, path: str | Path) -> None:
        """Write the JSON to a temporary name, then rename."""
        text = self.to_json()
        write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))

    @classmethod
    def from_json(cls, text: str, path: str | Path) -> SentencePieceTokenizer:
        """The tokenizer ``to_json`` wrote as ``text``, read from ``path``."""
        try:
            d = json.loads(text)[KIND]
            return cls(base64.b64decode(d["model"], validate=True), d["vocab"],
                       add_eos=bool(d["add_eos"]), eos=d["eos"], unk=d["unk"], pad=d["pad"])
        except (KeyError, TypeError, ValueError) as err:
            raise UsageError(f"{path}: not a valid sentencepiece tokenizer file ({err})") from None
        except UsageError as err:
            raise UsageError(f"{path}: {err}") from None


def train_sentencepiece(texts: Iterable[str], vocab_size: int) -> SentencePieceTokenizer:
    """A unigram sentencepiece model learned from ``texts`` (``sentencepiece_model``), its ids
    sentencepiece's own with decoderkit's specials at 0-3; ``encode`` adds nothing (batching
    adds EOS)."""
    model = sentencepiece_model(texts, vocab_size, OUR_SPECIALS)
    spm = sentencepiece.SentencePieceProcessor(model_proto=model)
    vocab = {spm.id_to_piece(i): i for i in range(spm.get_piece_size())}
    return SentencePieceTokenizer(model, vocab, add_eos=False, eos=OUR_SPECIALS["eos"],
                                  unk=OUR_SPECIALS["unk"], pad=OUR_SPECIALS["pad"])


MARIAN_SPECIALS = {"eos": "</s>", "unk": "<unk>"}  # what Marian's own vocabularies hold: ids 0, 1


def sentencepiece_model(texts: Iterable[str], vocab_size: int, specials: dict[str, str]
                        ) -> bytes:
    """The bytes of a unigram sentencepiece model (a ``.spm`` file) learned from ``texts``:
    at most ``vocab_size`` pieces (fewer if the text has fewer), ``specials`` (kind -> piece,
    of pad / bos / eos / unk) first, in their order; a kind not named has none. Every
    character is kept (coverage 1.0: an alphabetic script's rare letters, not <unk>).
    Deterministic: one thread, every sentence used."""
    if not isinstance(vocab_size, int) or vocab_size <= len(specials):
        raise UsageError(f"vocab_size must be an int > {len(specials)}, got {vocab_size!r}")
    order = list(specials)
    options = {f"{kind}_id": order.index(kind) if kind in specials else -1
               for kind in ("pad", "bos", "eos", "unk")}
    options |= {f"{kind}_piece": piece for kind, piece in specials.items()}
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(t for t in texts if t), model_writer=model,
            vocab_size=vocab_size, model_type="unigram", character_coverage=1.0,
            hard_vocab_limit=False, num_threads=1, input_sentence_size=0,
            max_sentence_length=1 << 16, minloglevel=2, **options)
    except RuntimeError as err:
        raise UsageError(f"sentencepiece could not learn a vocabulary ({err})") from None
    return model.getvalue()
