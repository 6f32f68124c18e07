"""Marian directories (HF ``MarianMTModel`` + sentencepiece): exact to Hugging Face.

Every directory is built here: a random small ``MarianMTModel`` saved with ``save_pretrained``
and sentencepiece models trained on generated text (``marian_helpers``)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from conftest import (
    FLOAT32_ENGINES,
    assert_ranked_agree_where_decided,
    assert_tokens_agree_where_decided,
    generation_margins,
    translation_margins,
)
from interop.marian_helpers import hf_model, hf_tokenizer, sentences, sources, write_marian
from safetensors.torch import load_file, save_file

from decoderkit.base.errors import UsageError
from decoderkit.base.families import SEQ2SEQ
from decoderkit.generation.seq2seq.decoding import greedy_decode
from decoderkit.generation.seq2seq.search import beam_search
from decoderkit.interop.checkpoints import checkpoint_config, load_checkpoint
from decoderkit.interop.marian.hf import load_marian, read_config
from decoderkit.interop.marian.hf_export import marian_config
from decoderkit.nn.masks import causal_mask, pad_ids, padding_mask

# @pytest.mark.engines: the tests that compare two engines or precisions, rerun under
# AVX2 by `make test` (the others check files, messages and refusals)

# (activation, separate vocabularies, generator tied to the target embedding, seed, EOS bias):
# seeds and biases picked so that outputs end at many lengths, and some at the bound
KINDS = {"swish-shared": ("swish", False, True, 12, 1.5),
         "relu-separate": ("relu", True, True, 3, 1.5),
         "swish-untied": ("swish", False, False, 3, 2.0)}


@pytest.fixture(scope="module", params=list(KINDS))
def marian_dir(request, tmp_path_factory):
    activation, separate, tie, seed, eos_bias = KINDS[request.param]
    return write_marian(tmp_path_factory.mktemp(request.param), activation=activation,
                        separate=separate, tie_generator=tie, seed=seed, eos_bias=eos_bias)


def _batch(tok, texts):
    enc = tok(texts, return_tensors="pt", padding=True)
    return enc.input_ids, enc.attention_mask


@pytest.mark.engines
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_log_probabilities_equal_hf_on_padded_batches(marian_dir, dtype, tol):
    with torch.device("cpu"):
        torch.set_default_dtype(dtype)  # our sinusoid table built in dtype (exact in float64)
        try:
            ckpt = load_marian(marian_dir)
        finally:
            torch.set_default_dtype(torch.float32)
    ours, c = ckpt.model.to(dtype), ckpt.config
    theirs = hf_model(marian_dir, dtype)
    tok = hf_tokenizer(marian_dir)
    src, attention = _batch(tok, sources(5, seed=3))
    assert (src == c.pad_id).any(), "the batch must have padding"
    gen = torch.Generator().manual_seed(0)
    tgt = torch.randint(0, c.tgt_vocab, (src.size(0), 9), generator=gen)
    tgt[:, 0] = c.bos_id  # Marian's decoder start: the pad id, visible as a key
    with torch.no_grad():
        ref = torch.log_softmax(theirs(input_ids=src, attention_mask=attention,
                                       decoder_input_ids=tgt).logits, dim=-1)
        got = ours.generator(ours(src, tgt, padding_mask(src, c.pad_id), causal_mask(9)))
    assert got.dtype == dtype
    assert (got - ref).abs().max() <= tol


@pytest.mark.engines
def test_greedy_tokens_equal_hf_generate(marian_dir):
    ckpt, theirs, tok = load_marian(marian_dir), hf_model(marian_dir), hf_tokenizer(marian_dir)
    c = ckpt.config
    src, attention = _batch(tok, sources(50, seed=5))
    # HF's own defaults forced EOS at max_length (forced_eos_token_id); ours never forces it
    ref = theirs.generate(input_ids=src, attention_mask=attention, num_beams=1, do_sample=False,
                          max_length=31, bad_words_ids=[[c.pad_id]], forced_eos_token_id=None)
    out = greedy_decode(ckpt.model, src, None, max_len=30, explain=2)
    got = out.tokens
    assert (ref[:, 0] == c.bos_id).all()
    assert (got == c.eos_id).any() and not (got == c.eos_id).any(dim=1).all(), \
        "some outputs must end at EOS and some at the length bound"
    hf = [[t for t in row if t != c.pad_id] for row in ref[:, 1:].tolist()]
    ours = [row[:n] for row, n in zip(got.tolist(), out.lengths.tolist(), strict=True)]
    assert_tokens_agree_where_decided(hf, ours, generation_margins(out), FLOAT32_ENGINES,
                                      at_least=40)


def test_tokenizer_ids_equal_marian_tokenizer(marian_dir):
    ckpt, tok = load_marian(marian_dir), hf_tokenizer(marian_dir)
    texts = sentences(1000, seed=11)
    assert "" in texts and any(">>" in t for t in texts) and any("😀" in t for t in texts)
    for text in texts:
        assert ckpt.src_tokenizer.encode(text) == tok(text).input_ids, text
        # targets: HF appends EOS to labels; our batching adds it (make_batch)
        assert ckpt.tgt_tokenizer.encode(text) + [ckpt.config.eos_id] \
            == tok(text_target=text).input_ids, text


def test_decode_equals_marian_tokenizer(marian_dir):
    ckpt, tok = load_marian(marian_dir), hf_tokenizer(marian_dir)
    gen = torch.Generator().manual_seed(1)
    for _ in range(200):
        ids = torch.randint(0, ckpt.config.tgt_vocab, (12,), generator=gen).tolist()
        assert ckpt.tgt_tokenizer.decode(ids) == tok.decode(ids, skip_special_tokens=True)


def test_unknown_characters_are_those_read_as_unk(marian_dir):
    tok = load_marian(marian_dir).src_tokenizer
    unk = tok.vocab[tok.unk]
    text = "hello ж world ☃"
    found = tok.unknown_characters(text)
    assert found == ["ж", "☃"] and all(unk in tok.encode(ch) for ch in found)
    assert unk not in tok.encode("hello world")


def test_checkpoint_dispatch_reads_marian_directories(marian_dir, tmp_path):
    assert checkpoint_config(marian_dir) == load_marian(marian_dir).config
    ckpt = load_checkpoint(marian_dir)
    assert ckpt.meta["origin"] == "marian" and ckpt.config.positions == "split"
    assert ckpt.config.bos_id == ckpt.config.pad_id and ckpt.config.eos_id == 0


def test_pytorch_model_bin_reads_the_same(marian_dir, tmp_path):
    copy = tmp_path / "bin"
    shutil.copytree(marian_dir, copy)
    torch.save(load_file(copy / "model.safetensors"), copy / "pytorch_model.bin")
    (copy / "model.safetensors").unlink()
    a, b = load_marian(marian_dir).model.state_dict(), load_marian(copy).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def _edited(marian_dir, tmp_path, config=None, tensors=None):
    copy = tmp_path / "edited"
    shutil.copytree(marian_dir, copy)
    if config:
        raw = json.loads((copy / "config.json").read_text())
        (copy / "config.json").write_text(json.dumps(config(raw)))
    if tensors:
        state = load_file(copy / "model.safetensors")
        save_file(tensors(state), copy / "model.safetensors")
    return copy


@pytest.mark.parametrize("kind", ["swish-shared"])
def test_errors_name_the_file_and_the_key(kind, tmp_path_factory, tmp_path):
    base = write_marian(tmp_path_factory.mktemp("errors"))
    key = "model.encoder.layers.0.fc1.weight"

    def drop(state):
        del state[key]
        return state

    def reshape(state):
        state[key] = state[key][:, :-1].contiguous()
        return state

    cases = [
        (dict(config=lambda r: {**r, "model_type": "bart"}), ["config.json", "model_type"]),
        (dict(config=lambda r: {**r, "decoder_layers": 3}), ["config.json", "decoder_layers"]),
        (dict(config=lambda r: {**r, "activation_function": "tanh"}),
         ["config.json", "activation_function"]),
        (dict(config=lambda r: {**r, "normalize_before": True}),
         ["config.json", "normalize_before"]),
        (dict(config=lambda r: {**r, "tie_word_embeddings": "no"}),
         ["config.json: tie_word_embeddings must be a bool, got 'no' (str)"]),
        (dict(config=lambda r: {**r, "activation_function": ["swish"]}),
         ["config.json: activation_function must be one of", "got ['swish'] (list)"]),
        (dict(config=lambda r: {**r, "d_model": 16.0}),
         ["config.json: d_model must be an integer in [1, 65536], got 16.0 (float)"]),
        (dict(config=lambda r: {**r, "scale_embedding": None}),
         ["config.json: scale_embedding must be a bool, got None"]),
        (dict(tensors=drop), ["model.safetensors", key, "missing"]),
        (dict(tensors=reshape), ["model.safetensors", key, "shape"]),
        (dict(tensors=lambda s: {**s, "extra.weight": torch.zeros(2)}),
         ["model.safetensors", "extra.weight"]),
        (dict(tensors=lambda s: {**s, key: s[key].fill_(float("nan"))}),
         ["model.safetensors", key, "finite"]),
    ]
    for i, (edit, words) in enumerate(cases):
        directory = _edited(base, tmp_path / str(i), **edit)
        with pytest.raises(UsageError) as err:
            load_marian(directory)
        assert all(w in str(err.value) for w in words), (words, str(err.value))
    directory = _edited(base, tmp_path / "spm")
    (directory / "target.spm").unlink()
    with pytest.raises(UsageError, match="target.spm"):
        load_marian(directory)
    directory = _edited(base, tmp_path / "vocab")
    (directory / "vocab.json").write_text("{not json")
    with pytest.raises(UsageError, match=r"vocab.json: not valid JSON \(.* line 1 column 2\)"):
        load_marian(directory)
    (directory / "vocab.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError, match="vocab.json: JSON nested too deeply"):
        load_marian(directory)
    directory = _edited(base, tmp_path / "settings")
    (directory / "tokenizer_config.json").write_text('{"separate_vocabs": "yes"}')
    with pytest.raises(UsageError, match="tokenizer_config.json: separate_vocabs must be a bool"):
        load_marian(directory)


def test_another_model_type_is_named_with_what_is_read(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bart"}))
    for call in (load_checkpoint, checkpoint_config):
        with pytest.raises(UsageError) as caught:
            call(tmp_path)
        message = str(caught.value)
        assert message.endswith("model_type 'bart', which decoderkit does not read (it reads "
                                "model_type marian, gpt2, openai-gpt, llama, mistral, qwen2, "
                                "qwen3)"), message
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(UsageError, match="is not a translation model: it is a Hugging Face GPT-2 "
                                         "/ OpenAI GPT directory, a language model; use "
                                         "`decoderkit lm sample`"):
        load_checkpoint(tmp_path, families=(SEQ2SEQ,))


@pytest.mark.engines
def test_translate_lines_equal_hf_batch_decode(marian_dir):
    from decoderkit.generation.seq2seq.translate import DecodeOptions, translate_lines

    ckpt, theirs, tok = load_marian(marian_dir), hf_model(marian_dir), hf_tokenizer(marian_dir)
    lines = sources(12, seed=7)
    got = translate_lines(ckpt, lines, DecodeOptions(max_len=25, explain=2), batch_size=4)
    src, attention = _batch(tok, lines)
    ref = theirs.generate(input_ids=src, attention_mask=attention, num_beams=1, max_length=26,
                          bad_words_ids=[[ckpt.config.pad_id]], forced_eos_token_id=None)
    whole = [[min(m)] for m in translation_margins(got)]  # a line decided at every step
    want = tok.batch_decode(ref, skip_special_tokens=True)
    assert_tokens_agree_where_decided([[t] for t in want], [[r.text] for r in got], whole,
                                      FLOAT32_ENGINES, at_least=10)
    assert all(r.error is None for r in got)


@pytest.mark.engines
def test_source_padding_is_masked_like_hf(marian_dir):
    """A row alone and the same row in a padded batch give the same log-probabilities."""
    ckpt = load_marian(marian_dir)
    c, model = ckpt.config, ckpt.model
    a, b = ckpt.src_tokenizer.encode("hello world"), ckpt.src_tokenizer.encode("the cat . " * 4)
    src = pad_ids([a, b], c.pad_id)
    tgt = torch.full((1, 1), c.bos_id)
    with torch.no_grad():
        alone = model.generator(model(src[:1, :len(a)], tgt, None, None))
        batched = model.generator(model(src, tgt.expand(2, 1), padding_mask(src, c.pad_id), None))
    assert (alone[0] - batched[0]).abs().max() <= 1e-5


@pytest.mark.engines
def test_teacher_forced_batches_equal_hf_labels(marian_dir):
    """Training's batches (decoder input [pad, y...], ``target_mask``) give HF's log-probabilities
    for ``labels``: the pad start token stays visible (hiding it changes every position)."""
    from decoderkit.training.seq2seq.data import make_batch

    ckpt, theirs = load_marian(marian_dir), hf_model(marian_dir)
    c, model = ckpt.config, ckpt.model
    texts = sources(4, seed=9)
    pairs = [(ckpt.src_tokenizer.encode(t), ckpt.tgt_tokenizer.encode(t[::-1])) for t in texts]
    batch = make_batch(pairs, c.pad_id, c.bos_id, c.eos_id)
    labels = batch.labels.masked_fill(batch.labels == c.pad_id, -100)
    with torch.no_grad():
        ref = torch.log_softmax(theirs(input_ids=batch.src, attention_mask=batch.src_mask[:, 0],
                                       labels=labels).logits, dim=-1)
        got = model.generator(model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask))
        hidden = batch.tgt_mask.clone()
        hidden[:, :, 0] = False  # the start token masked like padding
        wrong = model.generator(model(batch.src, batch.tgt_in, batch.src_mask, hidden))
    real = labels != -100
    assert (got - ref).abs()[real].max() <= 1e-5
    assert (wrong - ref).abs()[real].max() > 1e-3


@pytest.mark.engines
@pytest.mark.parametrize("length_penalty", [1.0, 0.6])
def test_beam_4_tokens_equal_hf_generate(marian_dir, length_penalty):
    """HF ranks ended hypotheses by log p / |y| ** length_penalty, |y| the generated tokens
    with EOS (its ``cur_len + 1 - decoder_prompt_len``): our ``length_penalty``, unchanged.
    Its search retires ended hypotheses (``beam_search(retire=True)``). HF's log-softmax and
    ours round differently (scores within FLOAT32_ENGINES): a rank's hypothesis is compared where
    HF's score gaps to its neighbours are decided (``assert_ranked_agree_where_decided``)."""
    ckpt, theirs, tok = load_marian(marian_dir), hf_model(marian_dir), hf_tokenizer(marian_dir)
    c = ckpt.config
    src, attention = _batch(tok, sources(50, seed=6))
    ref = theirs.generate(input_ids=src, attention_mask=attention, num_beams=4, do_sample=False,
                          max_length=31, bad_words_ids=[[c.pad_id]], forced_eos_token_id=None,
                          length_penalty=length_penalty, early_stopping=False,
                          num_return_sequences=4, output_scores=True,
                          return_dict_in_generate=True)
    got = beam_search(ckpt.model, src, None, beam_size=4, max_len=30, retire=True,
                      length_penalty=length_penalty, n_best=4)
    ended = {len(h) for row in got.nbest_tokens.tolist() for h in
             (r[:r.index(c.eos_id) + 1] for r in row if c.eos_id in r)}
    assert len(ended) >= 2, "hypotheses ending at several lengths"
    theirs_scores = ref.sequences_scores.view(50, 4)
    hyps = lambda t: [tuple(x for x in h if x != c.pad_id) for h in t.tolist()]  # noqa: E731
    sequences = ref.sequences[:, 1:].view(50, 4, -1)
    assert_ranked_agree_where_decided(
        [hyps(sequences[b]) for b in range(50)], theirs_scores.tolist(),
        [hyps(got.nbest_tokens[b]) for b in range(50)], got.nbest_scores.tolist(),
        FLOAT32_ENGINES, at_least=150)


def test_dropout_rates_are_read_and_exported_for_fine_tuning(marian_dir, tmp_path):
    rates = {"dropout": 0.1, "attention_dropout": 0.05, "activation_dropout": 0.2}
    c, _ = read_config(_edited(marian_dir, tmp_path, config=lambda raw: {**raw, **rates}))
    assert (c.dropout, c.attention_dropout, c.ffn_dropout) == (0.1, 0.05, 0.2)
    assert {k: marian_config(c)[k] for k in rates} == rates
    plain = dataclasses.replace(c, attention_dropout=None, ffn_dropout=None)  # dropout's rate
    assert marian_config(plain)["attention_dropout"] == marian_config(plain)[
        "activation_dropout"] == 0.1
