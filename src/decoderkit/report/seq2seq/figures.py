"""Figures drawn from the library's own functions (matplotlib, headless, PNG and SVG).

Each ``*_figure`` function returns a ``matplotlib.figure.Figure`` (no pyplot, no global state);
``save_figure`` writes it under a temporary name and renames. ``draw_figures`` writes the chosen
figures; ``attention_figures`` draws a model's self- and cross-attention maps for one sentence.

Legend: T target length, S source length, h heads, d model width, V vocabulary size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from matplotlib.patches import Polygon

from decoderkit.base.errors import UsageError
from decoderkit.base.files import output_mark, write_output
from decoderkit.nn.attention import attention
from decoderkit.nn.embeddings import sinusoidal_encoding
from decoderkit.nn.norms import LayerNorm
from decoderkit.nn.masks import causal_mask
from decoderkit.nn.seq2seq.model import EncoderDecoder
from decoderkit.report.seq2seq.attention_maps import attention_weights
from decoderkit.report.seq2seq.figure_names import ATTENTION, DEFAULT_TEXT, FORMATS, SEED_FIGURES

FIGURES_COMMAND = "figures"  # the command whose mark (base.files.output_mark) figures carry
METADATA_KEY = {"png": "Software", "svg": "Creator"}  # where each format's metadata holds it


def save_figure(fig: Figure, out_dir: str | Path, name: str,
                formats: Sequence[str] = FORMATS, dpi: int = 100) -> list[Path]:
    """Write ``fig`` as ``out_dir/name.<format>`` for each format; returns the paths. A file
    there is replaced only if an earlier ``decoderkit figures`` wrote it (its metadata says so:
    ``base.files.check_output_file``)."""
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UsageError(f"formats must be a non-empty subset of {FORMATS}, got {list(formats)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        metadata = {METADATA_KEY[fmt]: output_mark(FIGURES_COMMAND)}
        paths.append(write_output(out / f"{name}.{fmt}", "--out", FIGURES_COMMAND,
                                  lambda tmp, fmt=fmt, metadata=metadata: fig.savefig(
                                      tmp, format=fmt, dpi=dpi, bbox_inches="tight",
                                      metadata=metadata)))
    return paths


def _heatmap(fig: Figure, ax, values: np.ndarray, *, cmap: str = "viridis", vmin=None,
             vmax=None, annotate: str | None = None, label: str | None = None) -> None:
    """``values`` (rows, cols) as an image with a colour bar; ``annotate`` formats each cell."""
    im = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto",
                   interpolation="nearest")
    fig.colorbar(im, ax=ax, label=label, fraction=0.046, pad=0.04)
    if annotate:
        for (i, j), v in np.ndenumerate(values):
            if np.isfinite(v):
                ax.text(j, i, format(v, annotate), ha="center", va="center", fontsize=7,
                        color="white" if v < 0.5 * np.nanmax(values) else "black")


def causal_attention_figure(size: int = 8, seed: int = 0) -> Figure:
    """Causal attention probabilities of random scores: upper triangle blocked, rows sum to 1."""
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, size, 16, generator=gen, dtype=torch.float64)
    _, w = attention(q, k, k, causal_mask(size))  # (T, T)
    shown = w.numpy().copy()
    shown[~causal_mask(size).numpy()] = np.nan  # blocked cells drawn hatched, not as 0
    fig = Figure(figsize=(5.2, 4.2))
    ax = fig.add_subplot()
    ax.set_facecolor("#dddddd")
    ax.add_patch(_blocked_patch(size))
    _heatmap(fig, ax, shown, vmin=0, vmax=1, annotate=".2f", label="probability")
    ax.set(title="Causal attention: query i sees keys j <= i", xlabel="key position j",
           ylabel="query position i")
    return fig


def _blocked_patch(size: int) -> Polygon:
    """A hatched triangle over the cells above the diagonal of a size x size heatmap."""
    corners = [(-0.5, -0.5), (size - 0.5, -0.5), (size - 0.5, size - 1.5)]
    return Polygon(corners, closed=True, fill=False, hatch="//", edgecolor="#999999", lw=0)


def positional_encoding_figure(positions: int = 100, d_model: int = 64) -> Figure:
    """The sinusoidal table: low-index channels oscillate fast, high-index ones slowly."""
    pe = sinusoidal_encoding(positions, d_model).numpy()  # (positions, d)
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    _heatmap(fig, ax, pe, cmap="RdBu_r", vmin=-1, vmax=1, label="PE(p, c)")
    ax.set(title=f"Sinusoidal positions ({positions} positions x {d_model} channels)",
           xlabel="channel c (even: sin, odd: cos)", ylabel="position p")
    return fig


def relative_offset_figure(offset: int = 7, d_model: int = 64, positions: int = 100) -> Figure:
    """PE(p + k) is a rotation of each (sin, cos) pair of PE(p); the dot product against k."""
    pe = sinusoidal_encoding(positions + offset, d_model, dtype=torch.float64).numpy()
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)  # (d/2,)
    fig = Figure(figsize=(10, 4))
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for i, colour in zip((0, 2, 5), ("C0", "C1", "C2"), strict=True):
        sin_p, cos_p = pe[:positions, 2 * i], pe[:positions, 2 * i + 1]
        c, s = math.cos(offset * omega[i]), math.sin(offset * omega[i])
        rot_sin, rot_cos = c * sin_p + s * cos_p, -s * sin_p + c * cos_p
        err = max(np.abs(rot_sin - pe[offset:, 2 * i]).max(),
                  np.abs(rot_cos - pe[offset:, 2 * i + 1]).max())
        ax1.plot(sin_p[:20], cos_p[:20], "o", color=colour, ms=3,
                 label=f"pair {i}: PE(p), |R PE(p) - PE(p+{offset})| = {err:.0e}")
        ax1.plot(rot_sin[:20], rot_cos[:20], "x", color=colour, ms=5)
    ax1.set(title=f"Offset {offset} = rotation per frequency (x: rotated)", xlabel="sin(p w_i)",
            ylabel="cos(p w_i)", aspect="equal")
    ax1.legend(fontsize=6, loc="center")
    dots = pe[0] @ sinusoidal_encoding(positions, d_model, dtype=torch.float64).numpy().T
    ax2.plot(np.arange(positions), dots, label="PE(0) . PE(k)")
    ax2.axhline(0, color="grey", lw=0.5)
    ax2.set(title="Dot product against offset (not monotonic)", xlabel="offset k",
            ylabel="sum_i cos(k w_i)")
    ax2.legend()
    return fig


def norm_axes_figure() -> Figure:
    """LayerNorm pools the d features of one token; BatchNorm pools batch and time per feature.

    Drawn on a [B, T, d] = [2, 3, 4] tensor, rows (b, t) x columns d, cells show the outputs.
    """
    B, T, d = 2, 3, 4
    x = torch.arange(B * T * d, dtype=torch.float64).view(B, T, d) ** 1.5 / 4  # [2, 3, 4]
    with torch.no_grad():
        ln = LayerNorm(d).double()(x).reshape(B * T, d).numpy()
    bn = F.batch_norm(x.transpose(1, 2), None, None, training=True).transpose(1, 2)
    panels = (("LayerNorm: one group per token (b, t)", ln, np.repeat(np.arange(B * T), d)),
              ("BatchNorm: one group per feature", bn.reshape(B * T, d).numpy(),
               np.tile(np.arange(d), B * T)))
    fig = Figure(figsize=(10, 4))
    for n, (title, values, group) in enumerate(panels):
        ax = fig.add_subplot(1, 2, n + 1)
        ax.imshow(group.reshape(B * T, d), cmap="tab10", vmin=0, vmax=9, alpha=0.6)
        for (i, j), v in np.ndenumerate(values):
            ax.text(j, i, f"{v:+.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(d), [f"f{j}" for j in range(d)])
        ax.set_yticks(range(B * T), [f"b{i // T} t{i % T}" for i in range(B * T)])
        ax.set(title=title, xlabel="feature (d = 4)", ylabel="token (B = 2, T = 3)")
    fig.suptitle("Normalisation axes on [B, T, d] = [2, 3, 4] (colour = statistics group)")
    return fig


def label_smoothing_figure(classes: int = 5, eps: float = 0.1, gold: int = 2) -> Figure:
    """Smoothed target (uniform mixture) and the loss against the gold-class probability."""
    from decoderkit.training.objective import LabelSmoothingLoss

    smooth = LabelSmoothingLoss(eps, ignore_index=None, reduction="none")
    plain = LabelSmoothingLoss(0.0, ignore_index=None, reduction="none")
    target = torch.tensor([gold])
    q = smooth.target_distribution(target, classes)[0].numpy()  # (V,)
    p_gold = np.linspace(0.02, 0.99, 200)
    probs = np.repeat(((1 - p_gold) / (classes - 1))[:, None], classes, axis=1)  # (200, V)
    probs[:, gold] = p_gold
    logp = torch.from_numpy(np.log(probs))
    targets = target.expand(len(p_gold))
    fig = Figure(figsize=(10, 4))
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    bars = ax1.bar(range(classes), q, color=["C1" if i == gold else "C0" for i in range(classes)])
    ax1.bar_label(bars, fmt="%.2f")
    ax1.set(title=f"Target, {classes} classes, eps {eps}", xlabel="class", ylabel="q_i",
            ylim=(0, 1.1))
    ax2.plot(p_gold, smooth(logp, targets).numpy(), label=f"smoothed (eps {eps})")
    ax2.plot(p_gold, plain(logp, targets).numpy(), "--", label="plain cross-entropy")
    ax2.axvline(q[gold], color="grey", lw=0.5)
    ax2.set(title="Loss vs predicted gold probability (rest uniform)", xlabel="p_gold",
            ylabel="loss")
    ax2.legend()
    return fig


def warmup_figure(widths: Sequence[int] = (256, 512), warmup: int = 4000,
                  steps: int = 20000) -> Figure:
    """The warm-up schedule: linear rise to step ``warmup``, then s^-0.5 decay."""
    from decoderkit.training.objective import noam_rate

    s = np.arange(1, steps + 1, 10)
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    for d in widths:
        ax.plot(s, [noam_rate(int(i), d, warmup) for i in s], label=f"d_model {d}")
    ax.axvline(warmup, color="grey", lw=0.5)
    ax.set(title=f"Learning rate, warm-up {warmup} steps", xlabel="step", ylabel="rate")
    ax.legend()
    return fig


FIGURES: dict[str, Callable[[], Figure]] = dict(zip(SEED_FIGURES, (
    causal_attention_figure, positional_encoding_figure, relative_offset_figure,
    norm_axes_figure, label_smoothing_figure, warmup_figure), strict=True))


def attention_grid_figure(weights: Sequence[torch.Tensor], rows: Sequence[str],
                          cols: Sequence[str], title: str) -> Figure:
    """One heatmap per layer (grid rows) and head (grid columns); weights: per layer (h, T, K)."""
    n_layers, n_heads = len(weights), weights[0].size(0)
    w_in, h_in = max(2.2, 0.16 * len(cols)), max(2.2, 0.16 * len(rows))  # one panel, inches
    fig = Figure(figsize=(w_in * n_heads + 1, h_in * n_layers + 0.6), layout="constrained")
    axes = fig.subplots(n_layers, n_heads, squeeze=False)
    for layer, w in enumerate(weights):
        for head in range(n_heads):
            ax = axes[layer, head]
            im = ax.imshow(w[head].float().numpy(), vmin=0, vmax=1, cmap="viridis")
            ax.set_xticks(range(len(cols)), cols, fontsize=6, rotation=90)
            ax.set_yticks(range(len(rows)), rows, fontsize=6)
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=8)
    fig.colorbar(im, ax=axes, shrink=0.6, label="attention probability")
    fig.suptitle(title)
    return fig


def attention_figures(model: EncoderDecoder, src: torch.Tensor, tgt: torch.Tensor,
                      src_labels: Sequence[str], in_labels: Sequence[str],
                      out_labels: Sequence[str], out_dir: str | Path,
                      formats: Sequence[str] = FORMATS, dpi: int = 100) -> list[Path]:
    """Draw ``attention_self`` (T x T) and ``attention_cross`` (T x S) for one sentence.

    src (1, S) and tgt (1, T) ids, tgt = [BOS, y1..y(T-1)]; axis labels: source tokens, the
    decoder inputs (self-attention keys) and the tokens each row predicts (y1..yT).
    """
    if not len(src_labels) == src.size(1) or not len(in_labels) == len(out_labels) == tgt.size(1):
        raise UsageError(f"need one label per token: src {src.size(1)} ids vs "
                         f"{len(src_labels)} labels, tgt {tgt.size(1)} ids vs "
                         f"{len(in_labels)} / {len(out_labels)} labels")
    self_w, cross_w = attention_weights(model, src, tgt)
    paths = save_figure(attention_grid_figure(self_w, out_labels, in_labels,
                                              "Decoder self-attention (row: token predicted)"),
                        out_dir, "attention_self", formats, dpi)
    return paths + save_figure(attention_grid_figure(cross_w, out_labels, src_labels,
                                                     "Cross-attention to the source"),
                               out_dir, "attention_cross", formats, dpi)


def checkpoint_attention(directory: str | Path, text: str, out_dir: str | Path,
                         formats: Sequence[str] = FORMATS, dpi: int = 100) -> list[Path]:
    """Translate ``text`` greedily with the checkpoint in ``directory``, then draw the
    attention maps of that translation (a teacher-forced pass over the model's own output)."""
    from decoderkit.generation.seq2seq.decoding import greedy_decode
    from decoderkit.generation.seq2seq.bounds import default_max_len
    from decoderkit.base.families import SEQ2SEQ
    from decoderkit.interop.checkpoints import load_checkpoint

    ckpt = load_checkpoint(directory, families=(SEQ2SEQ,))
    c = ckpt.config
    ids = ckpt.src_tokenizer.encode(text)
    if not ids:
        raise UsageError(f"text {text!r} has no tokens for this checkpoint's source vocabulary")
    src = torch.tensor([ids])  # (1, S)
    out = greedy_decode(ckpt.model, src, None, max_len=default_max_len(len(ids), c.max_len))
    generated = out.tokens[0, : int(out.lengths[0])].tolist()  # y1..yT, EOS included if reached
    tgt = torch.tensor([[c.bos_id, *generated[:-1]]])  # (1, T) decoder inputs

    def show(tokenizer, seq):
        return [t.replace(" ", "\u2423") for t in tokenizer.tokens(seq)]

    return attention_figures(ckpt.model, src, tgt, show(ckpt.src_tokenizer, ids),
                             show(ckpt.tgt_tokenizer, tgt[0].tolist()),
                             show(ckpt.tgt_tokenizer, generated), out_dir, formats, dpi)


def draw_figures(out_dir: str | Path, names: Sequence[str] | None = None,
                 formats: Sequence[str] = FORMATS, dpi: int = 100,
                 checkpoint: str | Path | None = None, text: str = DEFAULT_TEXT) -> list[Path]:
    """Write the figures ``names`` (default: every seed figure, plus the attention maps when a
    ``checkpoint`` is given) into ``out_dir``; returns the paths written."""
    known = [*FIGURES, ATTENTION]
    names = list(names) if names else [*FIGURES, *([ATTENTION] if checkpoint else [])]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise UsageError(f"figure names must be among {known}, got unknown {unknown}")
    if ATTENTION in names and checkpoint is None:
        raise UsageError("the attention figure needs a checkpoint directory")
    if not isinstance(dpi, int) or isinstance(dpi, bool) or dpi < 10:
        raise UsageError(f"dpi must be an int >= 10, got {dpi!r}")
    paths = [p for name in names if name != ATTENTION
             for p in save_figure(FIGURES[name](), out_dir, name, formats, dpi)]
    if ATTENTION in names:
        paths += checkpoint_attention(checkpoint, text, out_dir, formats, dpi)
    return paths
