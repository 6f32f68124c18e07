"""Character-level and BPE tokenizers: ids, specials, round trips, files."""

import pytest

from decoderkit.text.seq2seq.spm_tokenizer import (
    MARIAN_SPECIALS,
    SentencePieceTokenizer,
    sentencepiece_model,
    train_sentencepiece,
)
from decoderkit.text.seq2seq.tokenizer import SPECIALS, Tokenizer


def test_tokenizers_character_and_bpe(tmp_path):
    chars = Tokenizer.characters(["hello world"])
    ids = chars.encode("hello world")
    assert len(ids) == 11 and chars.decode([1, *ids, 2, 0, 0]) == "hello world"
    assert chars.tokens(chars.encode("lo")) == ["l", "o"]
    assert chars.encode("z") == [3]  # unknown character -> <unk>
    with pytest.raises(ValueError, match="token id 99 is outside"):
        chars.decode([99])
    bpe = Tokenizer.train_bpe(["the cat sat on the mat", "the dog ate the hat"] * 5, 40)
    assert bpe.vocab_size <= 40 and bpe.decode(bpe.encode("the cat ate")) == "the cat ate"
    assert [bpe.hf.id_to_token(i) for i in range(4)] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    bpe.save(tmp_path / "t.json")
    assert Tokenizer.load(tmp_path / "t.json").encode("the hat") == bpe.encode("the hat")


def test_unknown_characters_are_the_ones_encoded_as_unk():
    chars = Tokenizer.characters(["abc "])
    text = "a\u00e9b zz\U0001f642"
    assert chars.unknown_characters(text) == sorted({"\u00e9", "z", "\U0001f642"})
    assert [c for c, i in zip(text, chars.encode(text), strict=True) if i == 3] == \
        ["\u00e9", "z", "z", "\U0001f642"]  # the same characters, seen from the ids
    bpe = Tokenizer.train_bpe(["the cat sat on the mat"] * 5, 40)
    assert bpe.unknown_characters("the cat") == []
    assert bpe.unknown_characters("the zebra, qu\u00e9") == sorted(set("zbr,qu\u00e9"))


def test_sentencepiece_learned_here_has_our_specials_and_round_trips(tmp_path):
    import sentencepiece

    texts = ["the cat sat on the mat", "el gato comió pescado", "the dog ate the hat"] * 20
    spm = train_sentencepiece(texts, 60)
    assert [spm.pieces[i] for i in range(4)] == list(SPECIALS)  # pad, bos, eos, unk
    assert 4 < spm.vocab_size <= 60
    assert spm.decode(spm.encode("el gato ate the cat")) == "el gato ate the cat"
    assert spm.encode("the cat")[-1] != 2  # no EOS added: batching adds it
    reference = sentencepiece.SentencePieceProcessor(model_proto=spm.model)  # its own ids
    assert spm.encode("the dog sat") == reference.encode("the dog sat")
    assert spm.unknown_characters("the qat") == ["q"]
    assert train_sentencepiece(texts, 60).model == spm.model  # deterministic
    spm.save(tmp_path / "s.json")
    loaded = Tokenizer.load(tmp_path / "s.json")
    assert isinstance(loaded, SentencePieceTokenizer) and loaded.encode("the hat") == \
        spm.encode("the hat")
    with pytest.raises(ValueError, match="vocab_size must be an int > 4"):
        train_sentencepiece(texts, 4)
    marian = sentencepiece.SentencePieceProcessor(
        model_proto=sentencepiece_model(texts, 60, MARIAN_SPECIALS))  # Marian's layout
    assert (marian.eos_id(), marian.unk_id(), marian.pad_id(), marian.bos_id()) == (0, 1, -1, -1)
    assert marian.id_to_piece(0) == "</s>" and marian.decode(marian.encode("el gato")) == \
        "el gato"


def test_a_lone_surrogate_is_one_error_in_every_kind_of_tokenizer():
    """A command-line byte that is not UTF-8 (Python's lone surrogate): HF tokenizers would
    raise 'TextInputSequence must be str'."""
    from decoderkit.base.errors import UsageError

    texts = ["the cat sat on the mat", "the dog ate the hat"] * 20
    for tokenizer in (Tokenizer.characters(texts), Tokenizer.train_bpe(texts, 40),
                      train_sentencepiece(texts, 40)):
        for call in (tokenizer.encode, tokenizer.unknown_characters):
            with pytest.raises(UsageError, match="byte 0xff, not UTF-8, at character 2"):
                call("a\udcffb")
