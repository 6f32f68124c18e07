"""Hugging Face Marian directories (the opus-mt models) opened as decoderkit checkpoints.

A Marian model is the base Transformer with four options of ``ModelConfig``: sinusoids in the
"split" layout (all sines, then all cosines), ``scale_embeddings`` as ``scale_embedding`` says,
the decoder start token being the pad id (``bos_id = decoder_start_token_id``), and EOS 0.
``final_logits_bias`` is our generator's bias; ``share_encoder_decoder_embeddings`` is
``tie_embeddings``, ``tie_word_embeddings`` is ``tie_generator``, ``decoder_vocab_size`` is
``tgt_vocab``. Each attention's q, k and v projections are our packed ``in_proj`` rows. The
tokenizers are ``text.seq2seq.spm_tokenizer``'s (MarianTokenizer's ids). Nothing is downloaded:
``DIR`` is a local copy (``config.json``, ``model.safetensors`` or ``pytorch_model.bin``,
``source.spm``, ``target.spm``, ``vocab.json`` and, with separate vocabularies,
``target_vocab.json``). Whatever decoderkit cannot express is refused naming file and key.

Dropout, for fine-tuning: ``dropout``, ``attention_dropout`` and ``activation_dropout`` are our
``dropout``, ``attention_dropout`` and ``ffn_dropout``. Not carried over (inference is
unaffected): ``final_logits_bias`` being a fixed buffer in HF (ours is trained when fine-tuning).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from decoderkit.base.checks import FRACTION, LENGTH_PENALTY, MODEL_SIZES, count
from decoderkit.base.errors import UsageError
from decoderkit.base.files import TEXT_BYTES, check_input_file
from decoderkit.interop import huggingface
from decoderkit.interop.fields import read_field
from decoderkit.interop.huggingface import CONFIG, model_type, read_json, weights_file
from decoderkit.nn.seq2seq.model import EncoderDecoder, ModelConfig
from decoderkit.nn.weights import NameMap, Source, load_file, load_weights
from decoderkit.training.seq2seq.checkpoint import Checkpoint
from decoderkit.text.seq2seq.spm_tokenizer import SentencePieceTokenizer

SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB = ("source.spm", "target.spm", "vocab.json",
                                               "target_vocab.json")
TOKENIZER_CONFIG = "tokenizer_config.json"
GENERATION_CONFIG = "generation_config.json"
ORIGIN = "marian"  # meta["origin"] of a checkpoint that came from a Marian directory
# MarianConfig's defaults (transformers 5): save_pretrained may leave out a key at its default
DEFAULTS = {"vocab_size": 58101, "decoder_vocab_size": None, "max_position_embeddings": 1024,
            "encoder_layers": 12, "decoder_layers": 12, "encoder_ffn_dim": 4096,
            "decoder_ffn_dim": 4096, "encoder_attention_heads": 16,
            "decoder_attention_heads": 16, "activation_function": "gelu", "d_model": 1024,
            "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0,
            "decoder_start_token_id": 58100, "scale_embedding": False,
            "pad_token_id": 58100, "eos_token_id": 0, "share_encoder_decoder_embeddings": True,
            "tie_word_embeddings": True}
# HF activation names -> ours (nn.ffn.ACTIVATIONS)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish",
               "gelu_new": "gelu_tanh"}
# options of other BART-family configs that Marian's architecture has fixed: key -> its value
FIXED = {"normalize_before": False, "add_final_layer_norm": False,
         "normalize_embedding": False, "static_position_embeddings": True,
         "add_bias_logits": False}
# the range of each size key (the rest read here are token ids: ``ID``)
SIZES = {"vocab_size": MODEL_SIZES["src_vocab"], "d_model": MODEL_SIZES["d_model"],
         "max_position_embeddings": MODEL_SIZES["max_len"]} | {
    f"{side}_{key}": MODEL_SIZES[ours] for side in ("encoder", "decoder") for key, ours in
    (("layers", "n_layers"), ("ffn_dim", "d_ff"), ("attention_heads", "n_heads"))}
ID = count(0)
IGNORED = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")
# where a tied embedding may be stored instead (files written with every tied copy, or with
# only the shared one)
ALIASES = {"model.shared.weight": ("model.encoder.embed_tokens.weight",),
           "model.encoder.embed_tokens.weight": ("model.shared.weight",),
           "model.decoder.embed_tokens.weight": ("model.shared.weight",)}


def is_marian_directory(directory: str | Path) -> bool:
    """True if ``directory`` has a ``config.json`` whose ``model_type`` is "marian"."""
    return model_type(directory) == ORIGIN


def read_config(directory: str | Path) -> tuple[ModelConfig, dict]:
    """(our config, the raw ``config.json``) of a Marian directory, each key read with its type
    and bounds (``interop.fields.read_field``); refused naming the key."""
    file, raw = huggingface.read_config(directory, (ORIGIN,), "a translation model")
    h = {**DEFAULTS, **raw}

    def get(key, want=None, **kw):
        return read_field(h, key, SIZES.get(key, ID) if want is None else want, file, **kw)

    for enc, dec in (("encoder_layers", "decoder_layers"), ("encoder_ffn_dim", "decoder_ffn_dim"),
                     ("encoder_attention_heads", "decoder_attention_heads")):
        if get(enc) != get(dec):
            raise UsageError(f"{file}: {enc}={h[enc]!r} but {dec}={h[dec]!r}; decoderkit's "
                             f"encoder and decoder share one size")
    for key, value in FIXED.items():
        if key in h and get(key, bool) != value:
            raise UsageError(f"{file}: {key}={h[key]!r} cannot be expressed (Marian: {value!r})")
    activation = get("activation_function", tuple(ACTIVATIONS))
    shared, tied = get("share_encoder_decoder_embeddings", bool), get("tie_word_embeddings", bool)
    decoder_vocab = get("decoder_vocab_size", MODEL_SIZES["tgt_vocab"], nullable=True)
    tgt_vocab = get("vocab_size") if shared or decoder_vocab is None else decoder_vocab
    fields = dict(
        src_vocab=get("vocab_size"), tgt_vocab=tgt_vocab, n_layers=get("encoder_layers"),
        d_model=get("d_model"), n_heads=get("encoder_attention_heads"),
        d_ff=get("encoder_ffn_dim"), dropout=get("dropout", FRACTION),
        attention_dropout=get("attention_dropout", FRACTION),
        ffn_dropout=get("activation_dropout", FRACTION),
        activation=ACTIVATIONS[activation],
        # transformers 5 ties nothing when tie_word_embeddings is false, the shared source and
        # target embeddings included
        tie_embeddings=shared and tied, tie_generator=tied,
        max_len=get("max_position_embeddings"), pad_id=get("pad_token_id"),
        bos_id=get("decoder_start_token_id"), eos_id=get("eos_token_id"), positions="split",
        scale_embeddings=get("scale_embedding", bool))
    try:
        config = ModelConfig(**fields)
    except UsageError as err:
        raise UsageError(f"{file}: {err}") from None
    return config, raw


def weight_names(config: ModelConfig) -> NameMap:
    """Our parameter name -> the HF tensor names it is made of (several: concatenated rows, the
    packed q, k, v). Tied parameters appear once, under the name HF stores them by; their
    other copies, and the positions (ours are computed), are ignored."""
    names = {"src_embed.lut.weight": ("model.shared.weight" if config.tie_embeddings
                                      else "model.encoder.embed_tokens.weight",)}
    if not config.tie_embeddings:
        names["tgt_embed.lut.weight"] = ("model.decoder.embed_tokens.weight",)
    if not config.tie_generator:
        names["generator.proj.weight"] = ("lm_head.weight",)
    for side, attns in (("encoder", (("self_attn", "self_attn"),)),
                        ("decoder", (("self_attn", "self_attn"), ("cross_attn", "encoder_attn")))):
        norms = ("self_attn_layer_norm", *(["encoder_attn_layer_norm"] if side == "decoder"
                                           else []), "final_layer_norm")
        for i in range(config.n_layers):
            ours, theirs = f"{side}.layers.{i}", f"model.{side}.layers.{i}"
            for kind in ("weight", "bias"):
                for mine, hf in attns:
                    names[f"{ours}.{mine}.in_proj.{kind}"] = tuple(
                        f"{theirs}.{hf}.{p}_proj.{kind}" for p in "qkv")
                    names[f"{ours}.{mine}.out_proj.{kind}"] = (f"{theirs}.{hf}.out_proj.{kind}",)
                for n, hf in enumerate(norms, start=1):
                    names[f"{ours}.res{n}.norm.{kind}"] = (f"{theirs}.{hf}.{kind}",)
                names[f"{ours}.ffn.w_1.{kind}"] = (f"{theirs}.fc1.{kind}",)
                names[f"{ours}.ffn.w_2.{kind}"] = (f"{theirs}.fc2.{kind}",)
    params = {ours: Source(theirs) for ours, theirs in names.items()}
    params["generator.proj.bias"] = Source(("final_logits_bias",), default=0.0,
                                           leading_one=True)  # HF loads without it too (zeros)
    return NameMap(params, aliases=ALIASES, ignored=frozenset(IGNORED) | _tied_duplicates(config),
                   computed=(".pe",))


def build_model(config: ModelConfig, file: Path, tensors: dict[str, torch.Tensor],
                ) -> EncoderDecoder:
    """Our model (default dtype) holding the HF ``tensors`` read from ``file``, through the
    weights pipeline (``nn.weights.load_weights``: each tensor named where it fails)."""
    return load_weights(EncoderDecoder(config), file, tensors, weight_names(config), CONFIG)


def _tied_duplicates(config: ModelConfig) -> set[str]:
    """HF names that may hold a copy of a tied weight (older files store every copy)."""
    dup = {"model.shared.weight"}  # untied: transformers 5 stores it and reads the others
    if config.tie_embeddings:
        dup |= {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"}
    if config.tie_generator:
        dup |= {"lm_head.weight"}
    return dup


def read_tokenizers(directory: str | Path, config: ModelConfig,
                    ) -> tuple[SentencePieceTokenizer, SentencePieceTokenizer]:
    """(source, target) tokenizers of a Marian directory, checked against ``config``."""
    directory = Path(directory)
    settings_file = directory / TOKENIZER_CONFIG
    settings = read_json(settings_file) if os.path.lexists(settings_file) else {}
    if not isinstance(settings, dict):
        raise UsageError(f"{settings_file}: expected a JSON object, got "
                         f"{type(settings).__name__}")
    separate = read_field(settings, "separate_vocabs", bool, settings_file, default=False)
    vocab_file = directory / VOCAB
    target_file = directory / (TARGET_VOCAB if separate else VOCAB)
    tokenizers = []
    for spm, file, add_eos, size, field in ((SOURCE_SPM, vocab_file, True, config.src_vocab,
                                             "vocab_size"),
                                            (TARGET_SPM, target_file, False, config.tgt_vocab,
                                             "decoder_vocab_size")):
        if not os.path.lexists(directory / spm):
            raise UsageError(f"{directory / spm} is missing (Marian's sentencepiece model)")
        model = check_input_file(directory / spm, "Marian's sentencepiece model", TEXT_BYTES)
        vocab = read_json(file)
        try:
            tok = SentencePieceTokenizer(model.read_bytes(), vocab, add_eos=add_eos)
        except UsageError as err:
            raise UsageError(f"{file} with {directory / spm}: {err}") from None
        if tok.vocab_size != size:
            raise UsageError(f"{file} has {tok.vocab_size} tokens but {CONFIG} says "
                             f"{field}={size}")
        for name, token, want in (("eos_token_id", tok.eos, config.eos_id),
                                  ("pad_token_id", tok.pad, config.pad_id)):
            if tok.vocab[token] != want:
                raise UsageError(f"{file} gives {token} the id {tok.vocab[token]} but "
                                 f"{CONFIG} says {name}={want}")
        tokenizers.append(tok)
    return tokenizers[0], tokenizers[1]


def read_generation(directory: str | Path, config: ModelConfig, raw: dict) -> dict:
    """The directory's own decoding settings, as ``generate`` reads them: ``config.json``'s
    keys overridden by ``generation_config.json``'s (when there is one), as the fields of
    ``generation.seq2seq.settings.GenerationSettings``; what decoderkit cannot follow is refused
    naming the file and key (a ban of a sequence of several tokens)."""
    file = Path(directory) / GENERATION_CONFIG
    own = read_json(file) if os.path.lexists(file) else {}
    if not isinstance(own, dict):
        raise UsageError(f"{file}: not a JSON object")
    gen = {**raw, **own}
    where = file if own else Path(directory) / CONFIG
    out = {}
    for key, name, low in (("num_beams", "beam", 1), ("max_length", "max_len", 2)):
        value = gen.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise UsageError(f"{where}: {key} must be an int >= {low}, got {value!r}")
        out[name] = min(value - 1, config.max_len) if key == "max_length" else value
    penalty = gen.get("length_penalty")
    if penalty is not None:
        if not LENGTH_PENALTY.accepts(penalty):
            raise UsageError(f"{where}: length_penalty must be {LENGTH_PENALTY.span}, got "
                             f"{penalty!r}")
        out["length_penalty"] = float(penalty)
    out["forced_eos"] = gen.get("forced_eos_token_id") == config.eos_id
    banned = gen.get("bad_words_ids") or []
    if not isinstance(banned, list) or any(
            not isinstance(b, list) or len(b) != 1 or b[0] != config.pad_id for b in banned):
        raise UsageError(f"{where}: bad_words_ids {banned!r:.80} cannot be followed: decoderkit "
                         f"bans the pad id {config.pad_id} (and BOS) only")
    return out


def load_marian(directory: str | Path, map_location: str | torch.device = "cpu") -> Checkpoint:
    """The Marian directory as a ``Checkpoint`` (eval mode on ``map_location``, step 0,
    ``meta["origin"] = "marian"``, ``meta["generation"]`` its decoding settings)."""
    directory = Path(directory)
    config, raw = read_config(directory)
    generation = read_generation(directory, config, raw)
    src_tok, tgt_tok = read_tokenizers(directory, config)
    file = weights_file(directory)
    model = load_file(config, EncoderDecoder, file, weight_names(config), CONFIG)
    model = model.to(map_location).eval()
    meta = {"step": 0, "origin": ORIGIN, "converted_from": str(directory.resolve()),
            "generation": generation}
    return Checkpoint(model, config, src_tok, tgt_tok, 0, directory, meta)
