"""Marian's options (``special:model.yml`` inside a Marian ``model.npz``) as our
``ModelConfig`` and the ``Layout`` of its embeddings (``interop.marian.npz`` reads the file).

Mapping. ``--type transformer`` only. Post-norm (``--transformer-preprocess ""
--transformer-postprocess dan``, Marian's default) or pre-norm (``n`` / ``da`` with
``--transformer-postprocess-top n``: our final norm); dropout ('d') is ignored, anything else
refused. Dropout rates (used only when fine-tuning): ``--transformer-dropout`` ``dropout``,
``--transformer-dropout-attention`` / ``-ffn`` ``attention_dropout`` / ``ffn_dropout`` (each
Marian's default 0 when absent). ``--dim-emb`` d_model, ``--transformer-heads``,
``--transformer-dim-ffn`` d_ff, ``--transformer-ffn-activation`` relu or swish, ``--enc-depth``
= ``--dec-depth``. Embeddings are scaled by sqrt(d) and Marian's sinusoids are
``positions="marian"``. Marian's weights are (in, out) and are transposed; q, k, v are packed
into our ``in_proj``. Tied embeddings: ``--tied-embeddings-all`` (one ``Wemb``),
``--tied-embeddings-src`` (source = target, own output layer ``decoder_ff_logit_out_Wt``),
``--tied-embeddings`` (target = output layer), or none.
"""

from __future__ import annotations

from dataclasses import dataclass

from decoderkit.base.checks import FRACTION, MODEL_SIZES, VOCAB
from decoderkit.base.errors import UsageError
from decoderkit.interop.fields import REQUIRED, read_field, shown
from decoderkit.nn.seq2seq.model import ModelConfig

MAX_LEN = 1024  # rows of our position table (Marian computes its sinusoids for any length)
ACTIVATIONS = {"relu": "relu", "swish": "swish"}  # Marian's FFN activation -> ours
# options whose value (other than this default) changes the function and cannot be expressed
REFUSED = {"transformer-decoder-autoreg": "self-attention", "transformer-tied-layers": [],
           "transformer-no-projection": False, "transformer-pool": False,
           "transformer-train-position-embeddings": False, "transformer-train-positions": False,
           "transformer-disable-position-embeddings": False,
           "transformer-attention-mask": "default", "transformer-alibi-shift": False,
           "transformer-no-affine": False, "transformer-no-bias": False,
           "transformer-ffn-depth": 2, "transformer-decoder-ffn-depth": 0,
           "transformer-postprocess-emb": "d", "input-types": [], "factors-dim-emb": 0,
           "lemma-dim-emb": 0, "ulr": False, "right-left": False, "skip": False,
           "guided-alignment": "none"}
NORMS = {("", "an", ""): False, ("n", "a", "n"): True}  # (pre, post, top) less 'd' -> norm_first


@dataclass(frozen=True)
class Layout:
    """What the name map needs beyond ``ModelConfig``: which embeddings Marian stores."""

    tied_all: bool  # one "Wemb" for source, target and output
    tied_src: bool  # one "Wemb" for source and target; output "decoder_ff_logit_out_W"
    omit_bias: bool  # no output bias stored (--output-omit-bias): ours is zero


def translate_options(options: dict, where: str) -> tuple[ModelConfig, Layout]:
    """Marian's options -> (our config, the layout); what we cannot express is refused naming
    the option and its value."""
    def opt(key, default=None):
        return options.get(key, default)

    if opt("type") != "transformer":
        raise UsageError(f"{where}: --type {opt('type')} cannot be expressed (transformer only)")
    for key, default in REFUSED.items():
        value = opt(key, default)
        if value != default and not (key == "transformer-postprocess-emb" and value == ""):
            raise UsageError(f"{where}: --{key} {value!r} cannot be expressed (only {default!r})")
    if opt("enc-depth") != opt("dec-depth"):
        raise UsageError(f"{where}: --enc-depth {opt('enc-depth')} and --dec-depth "
                         f"{opt('dec-depth')} differ; decoderkit's stacks share one depth")
    d_ff = opt("transformer-dim-ffn")
    if opt("transformer-decoder-dim-ffn", 0) not in (0, d_ff):
        raise UsageError(f"{where}: --transformer-decoder-dim-ffn "
                         f"{opt('transformer-decoder-dim-ffn')} differs from "
                         f"--transformer-dim-ffn {d_ff}; decoderkit has one d_ff")
    norms = tuple(str(opt(k, "")).replace("d", "") for k in (
        "transformer-preprocess", "transformer-postprocess", "transformer-postprocess-top"))
    if norms not in NORMS:
        raise UsageError(f"{where}: --transformer-preprocess {opt('transformer-preprocess')!r} "
                         f"--transformer-postprocess {opt('transformer-postprocess')!r} "
                         f"--transformer-postprocess-top {opt('transformer-postprocess-top')!r}"
                         " cannot be expressed (post-norm '' / dan / '', or pre-norm n / da / n)")
    activation = opt("transformer-ffn-activation")
    if activation not in ACTIVATIONS:
        raise UsageError(f"{where}: --transformer-ffn-activation {activation!r} cannot be "
                         f"expressed (known: {', '.join(ACTIVATIONS)})")
    vocabs = opt("dim-vocabs", [])
    if not isinstance(vocabs, list) or len(vocabs) != 2 or not all(map(VOCAB.accepts, vocabs)):
        raise UsageError(f"{where}: --dim-vocabs {shown(vocabs)}: expected two sizes (source, "
                         f"target), each {VOCAB.span}")

    def get(key, want=bool, default=False):
        return read_field(options, key, want, f"{where}: option", default=default)

    tied_all, tied_src = get("tied-embeddings-all"), get("tied-embeddings-src")
    fields = dict(src_vocab=vocabs[0] + 1, tgt_vocab=vocabs[1] + 1, d_ff=d_ff,
                  n_layers=get("enc-depth", MODEL_SIZES["n_layers"], REQUIRED),
                  d_model=get("dim-emb", MODEL_SIZES["d_model"], REQUIRED),
                  n_heads=get("transformer-heads", MODEL_SIZES["n_heads"], REQUIRED),
                  dropout=get("transformer-dropout", FRACTION, 0.0),
                  attention_dropout=get("transformer-dropout-attention", FRACTION, 0.0),
                  ffn_dropout=get("transformer-dropout-ffn", FRACTION, 0.0),
                  norm_first=NORMS[norms],
                  activation=ACTIVATIONS[activation], tie_embeddings=tied_all or tied_src,
                  tie_generator=tied_all or get("tied-embeddings"), max_len=MAX_LEN,
                  pad_id=vocabs[1], bos_id=vocabs[1], eos_id=0, src_pad_id=vocabs[0],
                  positions="marian")
    try:
        config = ModelConfig(**fields)
    except UsageError as err:
        raise UsageError(f"{where}: {err}") from None
    return config, Layout(tied_all, tied_src, get("output-omit-bias"))
