"""Tokenizers: character-level (built-in tasks) or BPE (your corpus), via HF ``tokenizers``.

Every tokenizer reserves the same special ids, matching ``ModelConfig``'s defaults:
<pad> = 0, <bos> = 1, <eos> = 2, <unk> = 3. ``encode`` never adds BOS/EOS (batching does);
``decode`` drops special tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from decoderkit.base.errors import UsageError
from decoderkit.base.checks import checked_ids
from decoderkit.base.files import TEXT_BYTES, check_input_file, write_atomic
from decoderkit.base.text import check_text
from decoderkit.text.seq2seq.spm_tokenizer import KIND, SentencePieceTokenizer

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


class Tokenizer:
    """Text <-> ids; a thin wrapper so every caller sees encode / decode / tokens."""

    def __init__(self, hf: HFTokenizer):
        for i, token in enumerate(SPECIALS):
            if hf.token_to_id(token) != i:
                raise UsageError(f"tokenizer must map {token} to id {i}, "
                                 f"got {hf.token_to_id(token)}")
        self.hf = hf

    @classmethod
    def characters(cls, texts: Iterable[str]) -> Tokenizer:
        """One token per character seen in ``texts`` (sorted, after the specials)."""
        chars = sorted(set("".join(texts)) - {"\n"})
        vocab = {token: i for i, token in enumerate((*SPECIALS, *chars))}
        hf = HFTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        hf.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
        hf.decoder = decoders.Fuse()
        hf.add_special_tokens(list(SPECIALS))
        return cls(hf)

    @classmethod
    def train_bpe(cls, texts: Iterable[str], vocab_size: int) -> Tokenizer:
        """Byte-pair encoding learned from ``texts``, words marked by a leading '▁'."""
        if not isinstance(vocab_size, int) or vocab_size <= len(SPECIALS):
            raise UsageError(f"vocab_size must be an int > {len(SPECIALS)}, got {vocab_size!r}")
        hf = HFTokenizer(models.BPE(unk_token="<unk>"))
        hf.pre_tokenizer = pre_tokenizers.Metaspace()
        hf.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                      show_progress=False)
        hf.train_from_iterator(texts, trainer)
        return cls(hf)

    @property
    def unk_token(self) -> str:
        """The token unknown text becomes."""
        return SPECIALS[UNK_ID]

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included (the model's ``src_vocab`` / ``tgt_vocab``)."""
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Text -> ids, without BOS/EOS."""
        check_text(text)
        return self.hf.encode(text, add_special_tokens=False).ids

    def unknown_characters(self, text: str) -> list[str]:
        """The characters of ``text`` this tokenizer cannot represent (encoded as <unk>),
        sorted, each once: what a model trained with it has never seen."""
        enc = self.hf.encode(check_text(text), add_special_tokens=False)
        return sorted({c for i, (a, b) in zip(enc.ids, enc.offsets, strict=True) if i == UNK_ID
                       for c in text[a:b]})

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text; pad/bos/eos/unk are dropped."""
        return self.hf.decode(self._checked(ids), skip_special_tokens=True)

    def tokens(self, ids: Iterable[int]) -> list[str]:
        """The token string of every id (specials included), e.g. for attention-map labels."""
        return [self.hf.id_to_token(i) for i in self._checked(ids)]

    def _checked(self, ids: Iterable[int]) -> list[int]:
        return checked_ids(ids, self.vocab_size)

    def save(self, path: str | Path) -> None:
        """Write the tokenizer JSON to a temporary name, then rename."""
        write_atomic(path, lambda tmp: tmp.write_text(self.hf.to_str(), encoding="utf-8"))

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """A tokenizer read from the JSON written by ``save`` (or by a
        ``SentencePieceTokenizer``'s, which it then returns); a malformed file is a UsageError."""
        path = check_input_file(path, "the tokenizer", TEXT_BYTES)  # no pipe, nothing huge
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise UsageError(f"{path}: not a valid tokenizer file (not UTF-8: {err})") from None
        if text.lstrip().startswith(f'{{"{KIND}"'):
            return SentencePieceTokenizer.from_json(text, path)
        try:
            return cls(HFTokenizer.from_str(text))
        except Exception as err:  # the Rust parser raises a bare Exception
            raise UsageError(f"{path}: not a valid tokenizer file ({err})") from None
