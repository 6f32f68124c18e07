"""Marian's own models (``model.npz`` as ``marian`` or ``pymarian.Trainer`` writes it) opened as
decoderkit checkpoints: a directory holding ``model.npz``, or the ``.npz`` itself.

Three parts, kept apart: the config translation (``interop.marian.npz_options``: the options
Marian stores inside the file as ``special:model.yml`` -> ``ModelConfig``; every option that
changes the function is mapped or refused by name), the name map (``weight_names``: our parameter ->
Marian's tensor) and the reading (``read_options``, ``read_vocabulary``).

Marian starts the decoder from an all-zero embedding, not a token: each vocabulary gains one
row of zeros at its own id V (``<pad>``): the target's is our bos_id and pad_id, the source's
our src_pad_id (the two differ when the vocabularies' sizes do); the generator's bias there is
``PAD_LOGIT``, so its probability is exactly 0 (and it is banned from the output). EOS is
``</s>`` (id 0 in a vocabulary Marian made), and a source ends with EOS, as Marian's does.

Marian's translator never chooses ``<unk>`` unless ``--allow-unk``: the checkpoint's own
decoding settings say so (``meta["generation"]["ban_unk"]``, ``translate --allow-unk`` lifts
it). A model with separate vocabularies learns ``<unk>`` for every target character its
vocabulary lacks ('!', '(' in a 1,000-piece English one), so choosing it was where ours and
Marian's translator parted.

Rule differences (written down; tests/interop/marian/test_npz.py measures them): our
LayerNorm's eps is 1e-5, Marian's 1e-9 (below rounding); Marian writes an allowed ``<unk>`` as
" ⁇ " (ours drops it from the text); Marian stops at 3 x the batch's source width
(``--max-length-factor``), ours at ``limits.default_max_len``. Pre-norm: after the first step
Marian's translator computes the decoder's self-attention keys and values from the layer's
un-normalised inputs (its ``DecoderLayerSelfAttention`` concatenates the raw inputs, and the
pre-norm fix in ``LayerAttention`` applies only when keys are the query's own tensor: training
and step 0); ours normalises them at every step, as Marian's training does, so a pre-norm
model translates as it was trained, not as Marian's translator does.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
import yaml

from decoderkit.base.errors import UsageError
from decoderkit.base.files import TEXT_BYTES, check_input_file
from decoderkit.interop.marian.npz_options import Layout, translate_options
from decoderkit.nn.seq2seq.model import EncoderDecoder, ModelConfig
from decoderkit.nn.weights import NameMap, Source, load_file
from decoderkit.training.seq2seq.checkpoint import Checkpoint
from decoderkit.text.seq2seq.spm_tokenizer import SentencePieceTokenizer

MODEL = "model.npz"  # the file a Marian model directory holds
OPTIONS = "special:model.yml"  # the entry of the .npz holding Marian's options as YAML
DECODER_YML, TRAIN_YML = ".decoder.yml", ".yml"  # suffixes of the configs beside the .npz
ORIGIN = "marian-npz"  # meta["origin"] of a checkpoint read from a Marian .npz
PAD, EOS, UNK = "<pad>", "</s>", "<unk>"
PAD_LOGIT = -1e4  # generator bias of the added zero row: exp(-1e4 - max) is 0 in float32/64


def weight_names(config: ModelConfig, layout: Layout) -> NameMap:
    """Our parameter -> its Marian tensors (q, k, v: three, packed; matrices stored (in, out)
    are transposed, vectors stored (1, d)), for the model of Marian's own vocabulary sizes
    (``add_start_row`` adds ours). Tied parameters appear once."""
    shared = layout.tied_all or layout.tied_src
    vector = {"leading_one": True}
    params = {"src_embed.lut.weight": Source(("Wemb" if shared else "encoder_Wemb",))}
    if not shared:
        params["tgt_embed.lut.weight"] = Source(("decoder_Wemb",))
    if not config.tie_generator:
        # Marian stores an untied output layer as (V, d), "Wt": already our orientation
        params["generator.proj.weight"] = Source(("decoder_ff_logit_out_Wt",))
    params["generator.proj.bias"] = Source(("decoder_ff_logit_out_b",), leading_one=True,
                                           default=0.0 if layout.omit_bias else None)
    pre = "_pre" if config.norm_first else ""
    for side, blocks in (("encoder", ("self_attn",)), ("decoder", ("self_attn", "cross_attn"))):
        for i in range(config.n_layers):
            ours, theirs = f"{side}.layers.{i}", f"{side}_l{i + 1}"
            norms = []
            for block in blocks:
                m = f"{theirs}_{'self' if block == 'self_attn' else 'context'}"
                a = f"{ours}.{block}"
                params[f"{a}.in_proj.weight"] = Source(tuple(f"{m}_W{p}" for p in "qkv"),
                                                       transposed=True)
                params[f"{a}.in_proj.bias"] = Source(tuple(f"{m}_b{p}" for p in "qkv"), **vector)
                params[f"{a}.out_proj.weight"] = Source((f"{m}_Wo",), transposed=True)
                params[f"{a}.out_proj.bias"] = Source((f"{m}_bo",), **vector)
                norms.append(f"{m}_Wo_ln")
            f = f"{theirs}_ffn"
            for k in (1, 2):
                params[f"{ours}.ffn.w_{k}.weight"] = Source((f"{f}_W{k}",), transposed=True)
                params[f"{ours}.ffn.w_{k}.bias"] = Source((f"{f}_b{k}",), **vector)
            for n, norm in enumerate([*norms, f"{f}_ffn_ln"], 1):
                params[f"{ours}.res{n}.norm.weight"] = Source((f"{norm}_scale{pre}",), **vector)
                params[f"{ours}.res{n}.norm.bias"] = Source((f"{norm}_bias{pre}",), **vector)
        if config.norm_first:
            params[f"{side}.norm.weight"] = Source((f"{side}_top_ln_scale",), **vector)
            params[f"{side}.norm.bias"] = Source((f"{side}_top_ln_bias",), **vector)
    return NameMap(params, ignored=frozenset({OPTIONS}), computed=(".pe",))


def build_model(config: ModelConfig, layout: Layout, file: Path) -> EncoderDecoder:
    """Our model holding the tensors of Marian's ``file``, through the weights pipeline (the
    options' claim checked first; each tensor named where it fails), then given the decoder's
    start row (``add_start_row``)."""
    marian = without_start_rows(config)
    model = load_file(marian, EncoderDecoder, file, weight_names(marian, layout),
                      f"its {OPTIONS}")
    return add_start_row(model, config)


def without_start_rows(config: ModelConfig) -> ModelConfig:
    """``config`` at Marian's own vocabulary sizes: the added rows of id V dropped (so its
    special ids are any ids below them, 0)."""
    return dataclasses.replace(config, src_vocab=config.src_vocab - 1,
                               tgt_vocab=config.tgt_vocab - 1, pad_id=0, bos_id=0,
                               src_pad_id=None)


def add_start_row(model: EncoderDecoder, config: ModelConfig) -> EncoderDecoder:
    """``model`` (Marian's vocabularies) as ``config``'s model: each embedding and the output
    layer gain the row of id V, zeros (Marian's all-zero decoder start), its bias
    ``PAD_LOGIT``."""
    grown = EncoderDecoder(config)
    state = {}
    for name, value in model.state_dict().items():
        if name.endswith("lut.weight") or name == "generator.proj.weight":
            value = torch.cat([value, value.new_zeros(1, value.size(1))])
        elif name == "generator.proj.bias":
            value = torch.cat([value, value.new_full((1,), PAD_LOGIT)])
        state[name] = value
    grown.load_state_dict(state)
    return grown


def model_file(path: str | Path) -> Path | None:
    """The ``.npz`` that ``path`` names (the file, or ``DIR/model.npz``); None if neither."""
    path = Path(path)
    if path.is_dir():
        path = path / MODEL
    return path if path.suffix == ".npz" and path.is_file() else None


def is_marian_npz(path: str | Path) -> bool:
    """True if ``path`` is a Marian ``.npz`` or a directory holding ``model.npz``."""
    return model_file(path) is not None


def read_options(file: Path) -> dict:
    """Marian's options of a Marian ``.npz``: its ``OPTIONS`` entry alone is read (the
    tensors are read once the claim of these options is checked: ``build_model``)."""
    check_input_file(file, "the Marian model")
    try:
        with np.load(file, allow_pickle=False) as arrays:
            found = OPTIONS in arrays.files
            if found and arrays.zip.getinfo(f"{OPTIONS}.npy").file_size > TEXT_BYTES:
                raise UsageError(f"{file}: its {OPTIONS} entry is larger than {TEXT_BYTES} "
                                 "bytes (not a model Marian wrote)")
            raw = arrays[OPTIONS] if found else None
    except UsageError:
        raise
    except Exception as err:  # zipfile and NumPy raise many kinds on a damaged file
        raise UsageError(f"{file}: truncated or not a NumPy .npz file ({err})") from None
    if raw is None or raw.dtype.kind not in "iub":
        raise UsageError(f"{file}: no {OPTIONS!r} entry (not a model Marian wrote)")
    try:
        options = yaml.safe_load(raw.tobytes().rstrip(b"\0").decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as err:
        raise UsageError(f"{file}: {OPTIONS} is not valid YAML "
                         f"({str(err).splitlines()[0] if str(err) else 'nested too deeply'})"
                         ) from None
    if not isinstance(options, dict):
        raise UsageError(f"{file}: {OPTIONS} is not a mapping of options")
    return options


def vocabulary_paths(file: Path) -> list[Path]:
    """The (source, target) vocabularies that ``FILE.decoder.yml`` (else ``FILE.yml``) beside
    the model names; a relative path, or an absolute one that is gone, is looked up beside
    the model (a directory copied elsewhere)."""
    for config in (file.with_name(file.name + DECODER_YML), file.with_name(file.name + TRAIN_YML)):
        if config.is_file():
            try:
                vocabs = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("vocabs")
            except (yaml.YAMLError, UnicodeDecodeError, AttributeError) as err:
                raise UsageError(f"{config}: not a Marian YAML config ({err})") from None
            if not isinstance(vocabs, list) or len(vocabs) != 2:
                raise UsageError(f"{config}: 'vocabs' must list two files (source, target), "
                                 f"got {vocabs!r}")
            paths = [Path(v) for v in vocabs]
            return [p if p.is_absolute() and p.is_file() else file.parent / p.name
                    if p.is_absolute() else file.parent / p for p in paths]
    raise UsageError(f"{file}: neither {file.name}{DECODER_YML} nor {file.name}{TRAIN_YML} "
                     "beside it, so its vocabularies are unknown")


def read_vocabulary(path: Path, size: int, add_eos: bool) -> SentencePieceTokenizer:
    """A Marian sentencepiece vocabulary of ``size`` pieces (ids as its own), plus ``<pad>``."""
    import sentencepiece

    if path.suffix != ".spm":
        raise UsageError(f"{path}: only sentencepiece vocabularies (.spm) can be read")
    data = check_input_file(path, "the vocabulary").read_bytes()
    spm = sentencepiece.SentencePieceProcessor()
    try:
        spm.LoadFromSerializedProto(data)
    except (RuntimeError, TypeError) as err:
        raise UsageError(f"{path}: not a sentencepiece model ({err})") from None
    if spm.get_piece_size() != size:
        raise UsageError(f"{path} has {spm.get_piece_size()} pieces but the model's "
                         f"--dim-vocabs says {size}")
    if spm.id_to_piece(0) != EOS:
        raise UsageError(f"{path}: id 0 is {spm.id_to_piece(0)!r}, Marian's EOS {EOS!r} expected")
    vocab = {spm.id_to_piece(i): i for i in range(size)}
    vocab[PAD] = size
    return SentencePieceTokenizer(data, vocab, add_eos=add_eos, unk=spm.id_to_piece(spm.unk_id()))


def read_config(path: str | Path) -> ModelConfig:
    """The ``ModelConfig`` of the Marian model at ``path`` (its tensors are read, not built)."""
    file = _model_file(path)
    return translate_options(read_options(file), str(file))[0]


def _model_file(path: str | Path) -> Path:
    file = model_file(path)
    if file is None:
        raise UsageError(f"--checkpoint {path}: neither a .npz file nor a directory with {MODEL}")
    return file


def load_marian_npz(path: str | Path, map_location: str | torch.device = "cpu") -> Checkpoint:
    """The Marian model at ``path`` as a ``Checkpoint`` (eval mode, step 0,
    ``meta["origin"] = "marian-npz"``, its translator's ``<unk>`` ban in ``meta["generation"]``)."""
    file = _model_file(path)
    config, layout = translate_options(read_options(file), str(file))
    src, tgt = vocabulary_paths(file)
    src_tok = read_vocabulary(src, config.src_vocab - 1, add_eos=True)
    tgt_tok = read_vocabulary(tgt, config.tgt_vocab - 1, add_eos=False)
    model = build_model(config, layout, file).to(map_location).eval()
    meta = {"step": 0, "origin": ORIGIN, "converted_from": str(file.resolve()),
            "generation": {"ban_unk": True}}  # as Marian's translator without --allow-unk
    return Checkpoint(model, config, src_tok, tgt_tok, 0, file.parent, meta)
