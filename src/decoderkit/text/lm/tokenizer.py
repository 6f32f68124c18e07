"""The language model's tokenizer: a character vocabulary (nanoGPT's shakespeare_char),
byte-level BPE (GPT-2's, or one learned from your text) or OpenAI GPT's (GPT-1's) BPE, over HF
``tokenizers``.

No id is reserved: a character vocabulary is the text's characters, sorted (ids 0..n-1, as
nanoGPT's ``prepare.py`` numbers them), newline and space included; byte-level BPE starts from
the 256 byte symbols, so it encodes any text. GPT-1's BPE lowercases and strips accents, splits
words and punctuation as BERT's basic tokenizer does, and marks word ends with ``</w>``; a
symbol its vocabulary lacks is ``<unk>``. ``tokenizer.json`` is the HF file (a WordLevel model
for characters, a BPE model with the ByteLevel or BERT pre-tokenizer for BPE).

A tokenizer of a Hugging Face directory also has its named special tokens (``Specials``: BOS,
EOS, unknown, padding, from ``tokenizer_config.json``, ``interop.lm.directory``): its EOS is
where generation ends, and a prompt is encoded as transformers' ``tokenizer(text)`` encodes it
(``encode_prompt``: with the BOS Llama's tokenizers put first). ``encode`` adds nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from decoderkit.base.checks import VOCAB, checked_ids, count
from decoderkit.base import moved
from decoderkit.base.errors import UsageError
from decoderkit.base.files import TEXT_BYTES, check_input_file, write_atomic
from decoderkit.base.text import check_text

CHAR, BPE = "char", "bpe"  # the two kinds
BYTE_SYMBOLS = 256  # byte-level BPE's base alphabet: every byte is a token
END_OF_TEXT = "<|endoftext|>"  # GPT-2's one special token, kept special when a vocabulary has it
UNKNOWN, WORD_END = "<unk>", "</w>"  # OpenAI GPT's unknown token and end-of-word suffix
VOCAB_RANGE = count(BYTE_SYMBOLS, VOCAB.high)  # what train_bpe's vocab_size accepts
ROLES = ("bos", "eos", "unk", "pad")  # the named special tokens, as Specials' fields


@dataclass(frozen=True)
class Specials:
    """A tokenizer's named special tokens (tokenizer_config.json's ``bos_token`` ...): each
    one's text, None where it has none; each must be in the vocabulary."""

    bos: str | None = None  # beginning of sequence (Llama's <s>, <|begin_of_text|>)
    eos: str | None = None  # end of sequence: where generation ends (GPT-2's <|endoftext|>)
    unk: str | None = None  # what a symbol the vocabulary lacks becomes (OpenAI GPT's <unk>)
    pad: str | None = None  # padding


class LMTokenizer:
    """Text <-> ids for a decoder-only LM; ``kind`` is "char" or "bpe"; ``specials``: its
    named special tokens (None: GPT-2's <|endoftext|> as EOS where the vocabulary has it)."""

    def __init__(self, hf: HFTokenizer, specials: Specials | None = None):
        model = json.loads(hf.to_str())["model"]
        if model.get("type") == "WordLevel":
            vocab = hf.get_vocab()
            itos = sorted(vocab, key=vocab.__getitem__)
            if sorted(vocab.values()) != list(range(len(vocab))) or \
                    any(len(c) != 1 for c in itos):
                raise UsageError("a character vocabulary must map single characters to ids "
                                 f"0..n-1, got {itos[:10]!r}")
            self.kind, self._stoi = CHAR, dict(vocab)
        elif model.get("type") == "BPE":
            self.kind, self._stoi = BPE, None
        else:
            raise UsageError(f"a language-model tokenizer is a character vocabulary or BPE, "
                             f"got a {model.get('type')!r} model")
        self.hf = hf
        for role in ROLES:
            token = None if specials is None else getattr(specials, role)
            if token is not None and hf.token_to_id(token) is None:
                raise UsageError(f"the {role} token {token!r} is not in the vocabulary")
        self.specials = specials

    @classmethod
    def characters(cls, text: str) -> LMTokenizer:
        """One token per distinct character of ``text``, ids in sorted order (nanoGPT's)."""
        return cls.from_chars(sorted(set(text)))

    @classmethod
    def from_chars(cls, chars: Sequence[str]) -> LMTokenizer:
        """Id i is ``chars[i]`` (e.g. a nanoGPT ``meta.pkl``'s itos); single distinct chars."""
        chars = list(chars)
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if not chars or bad or len(set(chars)) != len(chars):
            raise UsageError(f"a character vocabulary needs distinct single characters, got "
                             f"{len(chars)} entries" + (f" ({bad[0]!r} is not one character)"
                                                        if bad else ""))
        hf = HFTokenizer(models.WordLevel({c: i for i, c in enumerate(chars)}))  # no unknown
        hf.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        hf.decoder = decoders.Fuse()
        return cls(hf)

    @classmethod
    def train_bpe(cls, texts: Iterable[str], vocab_size: int) -> LMTokenizer:
        """Byte-level BPE (GPT-2's pre-tokenizer and byte alphabet) learned from ``texts``."""
        VOCAB_RANGE.check("vocab_size", vocab_size)
        hf = _byte_level(HFTokenizer(models.BPE()))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        hf.train_from_iterator(texts, trainer)
        return cls(hf)

    @classmethod
    def byte_level(cls, vocab_json: str | Path, merges_txt: str | Path) -> LMTokenizer:
        """GPT-2's own tokenizer from its ``vocab.json`` and ``merges.txt``."""
        vocab, merges = _read_bpe(vocab_json, merges_txt, "GPT-2")
        hf = _byte_level(HFTokenizer(models.BPE(vocab, merges)))
        if hf.token_to_id(END_OF_TEXT) is not None:
            hf.add_special_tokens([END_OF_TEXT])
        return cls(hf)

    @classmethod
    def openai_gpt(cls, vocab_json: str | Path, merges_txt: str | Path) -> LMTokenizer:
        """OpenAI GPT's (GPT-1's) BPE from an ``openai-gpt`` directory's ``vocab.json`` and
        ``merges.txt``: what transformers' ``OpenAIGPTTokenizer`` does without ftfy/spacy."""
        vocab, merges = _read_bpe(vocab_json, merges_txt, "OpenAI GPT")
        hf = HFTokenizer(models.BPE(vocab, merges, unk_token=UNKNOWN, end_of_word_suffix=WORD_END,
                                    fuse_unk=False))
        if hf.token_to_id(UNKNOWN) is not None:
            hf.add_special_tokens([UNKNOWN])
        hf.normalizer = normalizers.BertNormalizer(lowercase=True)  # accents stripped too
        hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        hf.decoder = decoders.BPEDecoder(suffix=WORD_END)
        return cls(hf)

    @property
    def eos_id(self) -> int | None:
        """The end-of-text id: ``specials.eos``'s (GPT-2's ``<|endoftext|>``), None: none."""
        return self.special_id("eos")

    @property
    def named(self) -> Specials:
        """The special tokens: ``specials``, else those of transformers' GPT-2 and OpenAI GPT
        tokenizers where the vocabulary has them (looked up now): <|endoftext|> as BOS, EOS
        and unknown token, else <unk> as the unknown token."""
        if self.specials is not None:
            return self.specials
        if self.hf.token_to_id(END_OF_TEXT) is not None:
            return Specials(bos=END_OF_TEXT, eos=END_OF_TEXT, unk=END_OF_TEXT)
        return Specials(unk=UNKNOWN if self.hf.token_to_id(UNKNOWN) is not None else None)

    @property
    def end_ids(self) -> frozenset[int]:
        """The ids that end a text: the named EOS, and GPT-2's <|endoftext|> wherever the
        vocabulary has it (a base model's end of text beside a chat model's end of turn)."""
        ids = (self.eos_id, self.hf.token_to_id(END_OF_TEXT))
        return frozenset(i for i in ids if i is not None)

    def special_id(self, role: str) -> int | None:
        """The id of the special token of ``role`` ("bos", "eos", "unk", "pad"), or None."""
        token = getattr(self.named, role)
        return None if token is None else self.hf.token_to_id(token)

    @property
    def vocab_size(self) -> int:
        """Number of ids (the model's ``vocab_size`` must be at least this)."""
        return self.hf.get_vocab_size()

    def missing_characters(self, text: str) -> list[str]:
        """The characters of ``text`` a character vocabulary lacks, sorted (none for BPE)."""
        check_text(text)
        if self._stoi is None:
            return []
        return sorted(set(text) - self._stoi.keys())

    def encode(self, text: str) -> list[int]:
        """Text -> ids; a character the vocabulary lacks is a ``UsageError`` naming it."""
        check_text(text)
        missing = self.missing_characters(text)
        if missing:
            shown = " ".join(map(repr, missing[:20])) + (" ..." if len(missing) > 20 else "")
            raise UsageError(f"{len(missing)} character(s) not in the model's character "
                             f"vocabulary: {shown}")
        if self._stoi is not None:  # a table lookup: the WordLevel model's ids, ~30x faster
            return [self._stoi[c] for c in text]
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """``encode``'s ids and each token's (start, end) characters in ``text`` (the
        tokenizer's offsets: where a training mask's character spans fall)."""
        if self._stoi is not None:
            return self.encode(text), [(i, i + 1) for i in range(len(text))]
        check_text(text)
        found = self.hf.encode(text, add_special_tokens=False)
        return found.ids, found.offsets

    def encode_prompt(self, text: str) -> list[int]:
        """Text -> ids as a prompt: ``encode``'s with what the tokenizer's post-processor adds
        (a Llama tokenizer's BOS first), as transformers' ``tokenizer(text)`` gives them."""
        ids = self.encode(text)
        if self._stoi is not None or self.hf.post_processor is None:
            return ids
        return self.hf.encode(text, add_special_tokens=True).ids

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Ids -> text (``skip_special``: without the special tokens' texts, as a chat reply is
        shown); an id outside the vocabulary is a ``UsageError``."""
        return self.hf.decode(checked_ids(ids, self.vocab_size), skip_special_tokens=skip_special)

    def save(self, path: str | Path) -> None:
        """Write ``tokenizer.json`` to a temporary name, then rename."""
        write_atomic(path, lambda tmp: tmp.write_text(self.hf.to_str(), encoding="utf-8"))

    @classmethod
    def load(cls, path: str | Path) -> LMTokenizer:
        """The tokenizer in a ``tokenizer.json``; a malformed file is a ``UsageError``."""
        path = check_input_file(path, "the tokenizer", TEXT_BYTES)  # no pipe, nothing huge
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise UsageError(f"{path}: cannot read the tokenizer ({err})") from None
        try:
            hf = HFTokenizer.from_str(text)
        except Exception as err:  # the Rust parser raises a bare Exception
            raise UsageError(f"{path}: not a valid tokenizer file ({err})") from None
        try:
            return cls(hf)
        except UsageError as err:
            raise UsageError(f"{path}: {err}") from None


def _read_bpe(vocab_json: str | Path, merges_txt: str | Path, what: str
              ) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocabulary, merges) of a ``vocab.json`` + ``merges.txt`` pair (``what`` names the
    tokenizer in messages); a missing or malformed file is refused."""
    for file in (vocab_json, merges_txt):
        if not Path(file).exists():
            raise UsageError(f"{file}: no such file ({what} tokenizer)")
        check_input_file(file, f"the {what} tokenizer's", TEXT_BYTES)  # no pipe, nothing huge
    try:
        return models.BPE.read_file(str(vocab_json), str(merges_txt))
    except Exception as err:  # the Rust reader raises a bare Exception
        raise UsageError(f"{vocab_json} / {merges_txt}: not a {what} vocabulary and merges "
                         f"file ({err})") from None


def _byte_level(hf: HFTokenizer) -> HFTokenizer:
    """GPT-2's byte-level set-up: its regex pre-tokenizer, no prefix space, byte decoder."""
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    return hf


__getattr__ = moved.forward(__name__)  # TextStream: moved to generation.lm.stops
