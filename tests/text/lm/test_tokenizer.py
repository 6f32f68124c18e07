"""The LM tokenizer: nanoGPT's character numbering, byte-level BPE equal to transformers'
GPT2Tokenizer on the same files, files, refusals, streaming text."""

import json

import pytest

from conftest import openai_gpt_files

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.stops import TextStream
from decoderkit.text.lm.tokenizer import LMTokenizer

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"


def test_characters_are_numbered_as_nanogpt_prepares_shakespeare_char():
    tok = LMTokenizer.characters(TEXT)
    chars = sorted(set(TEXT))  # nanoGPT: chars = sorted(list(set(data))); stoi = {ch: i}
    assert tok.kind == "char" and tok.vocab_size == len(chars)
    assert tok.encode(TEXT) == [chars.index(c) for c in TEXT]
    assert tok.encode("\n") == [0] and tok.encode(" ") == [1]  # no reserved ids
    assert tok.decode(tok.encode(TEXT)) == TEXT
    assert tok.encode(TEXT) == tok.hf.encode(TEXT).ids  # the lookup is the HF model's


def test_from_chars_keeps_the_given_order():
    tok = LMTokenizer.from_chars(["z", "\n", "a"])
    assert tok.encode("a\nz") == [2, 1, 0] and tok.decode([0, 2]) == "za"
    for bad in (["a", "a"], ["ab"], []):
        with pytest.raises(UsageError, match="distinct single characters"):
            LMTokenizer.from_chars(bad)


def test_missing_characters_are_named():
    tok = LMTokenizer.characters("abc \n")
    with pytest.raises(UsageError, match="2 character\\(s\\) not in .*'Z' '\u00e9'"):
        tok.encode("a Z \u00e9 b")
    with pytest.raises(UsageError, match="token id 5 is outside the vocabulary"):
        tok.decode([0, 5])


def test_save_and_load_round_trip(tmp_path):
    for tok in (LMTokenizer.from_chars(list("ba\n ")), LMTokenizer.train_bpe([TEXT] * 3, 300)):
        tok.save(tmp_path / "tokenizer.json")
        again = LMTokenizer.load(tmp_path / "tokenizer.json")
        assert again.kind == tok.kind and again.vocab_size == tok.vocab_size
        assert again.encode("a b\nab") == tok.encode("a b\nab")
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]  # no temporaries left
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UsageError, match="bad.json: not a valid tokenizer file"):
        LMTokenizer.load(tmp_path / "bad.json")


def test_train_bpe_is_byte_level_and_encodes_anything():
    tok = LMTokenizer.train_bpe([TEXT] * 5, 300)
    assert tok.kind == "bpe" and 256 < tok.vocab_size <= 300
    text = "Speak, Citizen! \u00e9\U0001f642 \t\n  x"
    assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode("speak, speak")) < len("speak, speak")  # merges were learned
    with pytest.raises(UsageError, match=r"vocab_size must be an integer in \[256, \d+\], got 100"):
        LMTokenizer.train_bpe([TEXT], 100)


def _gpt2_files(tmp_path):
    """A small GPT-2-format vocab.json and merges.txt (as GPT-2's own: byte symbols, the
    merges, <|endoftext|> last), learned here from a text."""
    trained = LMTokenizer.train_bpe([TEXT * 3, "I'll don't you've we're 123 4567"], 320).hf
    model = json.loads(trained.to_str())["model"]
    vocab = dict(model["vocab"])
    vocab["<|endoftext|>"] = len(vocab)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n",
                                         encoding="utf-8")
    return tmp_path / "vocab.json", tmp_path / "merges.txt"


def test_byte_level_equals_transformers_gpt2_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab, merges = _gpt2_files(tmp_path)
    ours = LMTokenizer.byte_level(vocab, merges)
    theirs = transformers.GPT2Tokenizer.from_pretrained(str(tmp_path))
    texts = [TEXT, " leading space", "I'll speak; you've heard  two  spaces\n\n\nend ",
             "caf\u00e9 \U0001f642 \u4e2d\u6587 123 4567", "a<|endoftext|>b", "\t tab\r\n"]
    for text in texts:
        assert ours.encode(text) == theirs.encode(text), text
        assert ours.decode(ours.encode(text)) == text
    assert ours.vocab_size == len(theirs)
    assert ours.encode("<|endoftext|>") == [ours.vocab_size - 1]


def test_byte_level_refuses_missing_or_bad_files(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        LMTokenizer.byte_level(tmp_path / "vocab.json", tmp_path / "merges.txt")
    (tmp_path / "vocab.json").write_text("[1, 2]")
    (tmp_path / "merges.txt").write_text("")
    with pytest.raises(UsageError, match="not a GPT-2 vocabulary"):
        LMTokenizer.byte_level(tmp_path / "vocab.json", tmp_path / "merges.txt")


def test_text_stream_holds_back_a_cut_character():
    tok = LMTokenizer.train_bpe(["ab"], 256)  # bytes only: \u00e9 is two tokens
    ids = tok.encode("a\u00e9b")
    assert len(ids) == 4
    stream = TextStream(tok)
    pieces = [stream.push(i) for i in ids]
    assert pieces == ["a", "", "\u00e9", "b"] and stream.flush() == ""
    cut = TextStream(tok)
    assert cut.push(ids[1]) == "" and cut.flush() == "\ufffd"


def _varied_sentences(n: int) -> list[str]:
    """``n`` sentences mixing case, accents, digits, punctuation, spacing, CJK, emoji and
    empty lines, drawn from a fixed seed."""
    import random

    rng = random.Random(26)
    words = TEXT.split() + ["Caf\u00e9", "na\u00efve", "\u00c5ngstr\u00f6m", "\u00dcBER",
                            "se\u00f1or", "1999", "3.14", "42nd", "don't", "I'll", "(yes)",
                            "-", "...", "!?", "\u4e2d\u6587", "\U0001f642", "e-mail", "\t",
                            "x\u0301", "\u00a0", "#7", "$5", "50%", "A&B", "\u2014"]
    spaces = [" ", " ", " ", "  ", "\n", "\n\n", "\t", ""]
    out = ["", "\n", " \n\n ", "\u00c9T\u00c9"]
    while len(out) < n:
        k = rng.randint(1, 14)
        out.append("".join(rng.choice(words) + rng.choice(spaces) for _ in range(k)))
    return out


def _reference_openai_gpt(vocab: dict, merges: list[str]):
    """GPT-1's own algorithm, written out: BERT's basic tokenizer (lowercase, strip accents,
    split punctuation), then per word greedy lowest-rank merges with ``</w>`` on the last
    symbol, and any piece outside the vocabulary ``<unk>``."""
    from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer

    basic = BasicTokenizer(do_lower_case=True)
    ranks = {tuple(m.split()): i for i, m in enumerate(merges)}

    def bpe(word: str) -> list[str]:
        symbols = list(word[:-1]) + [word[-1] + "</w>"]
        while len(symbols) > 1:
            pairs = [(ranks.get(p, len(ranks)), i) for i, p in
                     enumerate(zip(symbols[:-1], symbols[1:], strict=True))]
            rank, i = min(pairs)
            if rank == len(ranks):
                break
            pair = (symbols[i], symbols[i + 1])
            merged, j = [], 0
            while j < len(symbols):  # every occurrence of the pair, left to right
                if j < len(symbols) - 1 and (symbols[j], symbols[j + 1]) == pair:
                    merged.append(symbols[j] + symbols[j + 1])
                    j += 2
                else:
                    merged.append(symbols[j])
                    j += 1
            symbols = merged
        return symbols

    def encode(text: str) -> list[int]:
        return [vocab.get(p, vocab["<unk>"]) for w in basic.tokenize(text) for p in bpe(w)]

    return encode


def test_openai_gpt_equals_transformers_and_gpt1s_algorithm_on_1000_sentences(tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab_file, merges_file, vocab, merges = openai_gpt_files(tmp_path, TEXT)
    ours = LMTokenizer.openai_gpt(vocab_file, merges_file)
    theirs = transformers.OpenAIGPTTokenizer(vocab=str(vocab_file), merges=str(merges_file))
    reference = _reference_openai_gpt(vocab, merges)
    sentences = _varied_sentences(1000)
    unknown = 0
    for text in sentences:
        ids = ours.encode(text)
        assert ids == theirs.encode(text, add_special_tokens=False), repr(text)
        assert ids == reference(text), repr(text)
        unknown += ids.count(vocab["<unk>"])
    assert unknown > 50  # the CJK and emoji pieces: the unknown path was exercised
    assert ours.kind == "bpe" and ours.vocab_size == len(vocab)
    assert ours.decode(ours.encode("Caf\u00e9, don't!")) == "cafe , don ' t !"
    ours.save(tmp_path / "tokenizer.json")  # the normaliser and pre-tokenizer travel with it
    again = LMTokenizer.load(tmp_path / "tokenizer.json")
    assert [again.encode(t) for t in sentences[:50]] == [ours.encode(t) for t in sentences[:50]]


def test_openai_gpt_refuses_missing_or_bad_files(tmp_path):
    with pytest.raises(UsageError, match="merges.txt: no such file \\(OpenAI GPT tokenizer\\)"):
        (tmp_path / "vocab.json").write_text("{}")
        LMTokenizer.openai_gpt(tmp_path / "vocab.json", tmp_path / "merges.txt")
    (tmp_path / "vocab.json").write_text("[1, 2]")
    (tmp_path / "merges.txt").write_text("")
    with pytest.raises(UsageError, match="not a OpenAI GPT vocabulary"):
        LMTokenizer.openai_gpt(tmp_path / "vocab.json", tmp_path / "merges.txt")


def test_a_lone_surrogate_is_one_error_in_every_kind_of_tokenizer():
    """What Python makes of a command-line byte that is not UTF-8 (or a JSON '\\udcff'): HF
    tokenizers would raise 'TextInputSequence must be str'."""
    for tokenizer in (LMTokenizer.characters("abc"),
                      LMTokenizer.train_bpe(["some text to learn from"] * 4, 260)):
        for call in (tokenizer.encode, tokenizer.missing_characters):
            with pytest.raises(UsageError, match="byte 0xff, not UTF-8, at character 2"):
                call("a\udcffb")
