"""Figures: every file is written, opens, has a sensible size and is not blank; the attention
maps read the weights of a real teacher-forced pass."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import assert_picture, tiny_checkpoint
from decoderkit import make_model
from decoderkit.report.seq2seq.figures import (
    FIGURES,
    attention_figures,
    attention_weights,
    causal_attention_figure,
    checkpoint_attention,
    save_figure,
)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_each_seed_figure_is_written_as_png_and_svg(tmp_path, name):
    paths = save_figure(FIGURES[name](), tmp_path, name, dpi=60)
    assert [p.name for p in paths] == [f"{name}.png", f"{name}.svg"]
    assert_picture(paths[0])
    svg = paths[1].read_text()
    assert "<svg" in svg and len(svg) > 5000
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{name}.png", f"{name}.svg"]


def test_save_figure_rejects_unknown_format_and_leaves_nothing(tmp_path):
    with pytest.raises(ValueError, match="formats"):
        save_figure(causal_attention_figure(4), tmp_path / "out", "x", formats=("jpg",))
    assert not (tmp_path / "out").exists()


def test_attention_weights_are_causal_rows_of_probabilities():
    torch.manual_seed(0)
    model = make_model(9, 11, N=2, d_model=16, d_ff=32, h=4, dropout=0.0).eval()
    src, tgt = torch.tensor([[4, 5, 6, 7, 8]]), torch.tensor([[1, 3, 4]])
    self_w, cross_w = attention_weights(model, src, tgt)
    assert len(self_w) == len(cross_w) == 2
    for w in self_w:
        assert w.shape == (4, 3, 3)
        assert torch.equal(w.triu(1), torch.zeros_like(w))  # future keys exactly 0
        torch.testing.assert_close(w.sum(-1), torch.ones(4, 3))
    for w in cross_w:
        assert w.shape == (4, 3, 5)
        torch.testing.assert_close(w.sum(-1), torch.ones(4, 3))
    # the same weights as an independent recomputation of layer 1's self-attention
    layer = model.decoder.layers[0]
    with torch.no_grad():
        x = model.tgt_pos(model.tgt_embed(tgt))
        q, k, _ = layer.self_attn.split_heads_packed(layer.self_attn.in_proj(x))
    scores = (q @ k.transpose(-1, -2) / 2.0)[0].double().numpy()  # d_k = 4
    scores[:, np.triu(np.ones((3, 3), dtype=bool), 1)] = -np.inf
    ref = np.exp(scores - scores.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    np.testing.assert_allclose(self_w[0].numpy(), ref, atol=1e-6)


def test_attention_figures_need_one_label_per_token(tmp_path):
    model = make_model(9, 11, N=1, d_model=8, d_ff=16, h=2)
    src, tgt = torch.tensor([[4, 5]]), torch.tensor([[1, 3]])
    with pytest.raises(ValueError, match="one label per token"):
        attention_figures(model, src, tgt, ["a"], ["<bos>", "x"], ["x", "y"], tmp_path)


def test_checkpoint_attention_draws_self_and_cross_maps(tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "ckpt")
    paths = checkpoint_attention(ckpt, "29", tmp_path / "figs", formats=("png",),
                                 dpi=50)
    assert [p.name for p in paths] == ["attention_self.png", "attention_cross.png"]
    for p in paths:
        assert_picture(p, min_px=100)


def test_checkpoint_attention_rejects_text_without_tokens(tmp_path):
    ckpt = tiny_checkpoint(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="no tokens"):
        checkpoint_attention(ckpt, "", tmp_path / "figs")


def test_every_picture_the_manuals_embed_exists_and_is_not_blank():
    docs = Path(__file__).resolve().parents[3] / "docs"
    images = [docs / image for manual in docs.glob("*.md")
              for image in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", manual.read_text())]
    assert len(images) >= 9  # checking.md's eight figures, serving.md's explorer
    for image in images:
        assert_picture(image, min_px=200)


def test_figures_show_the_seed_facts():
    causal = causal_attention_figure(6).axes[0].images[0].get_array()  # (T, T), NaN = blocked
    blocked = np.triu(np.ones((6, 6), dtype=bool), 1)
    assert np.isnan(causal.filled(np.nan)[blocked]).all()
    np.testing.assert_allclose(np.nansum(causal.filled(np.nan), axis=1), np.ones(6))

    table = FIGURES["positional_encoding"]().axes[0].images[0].get_array()
    assert table.shape == (100, 64)
    np.testing.assert_array_equal(table[0, 0::2], 0.0)  # PE(0): sin 0, cos 1
    np.testing.assert_array_equal(table[0, 1::2], 1.0)

    smoothing = FIGURES["label_smoothing"]()
    heights = [bar.get_height() for bar in smoothing.axes[0].patches]
    np.testing.assert_allclose(heights, [0.02, 0.02, 0.92, 0.02, 0.02], atol=1e-12)
    p_gold, loss = smoothing.axes[1].lines[0].get_data()
    assert abs(p_gold[np.argmin(loss)] - 0.92) < 0.01  # smoothed loss is lowest at q_y

    warmup = FIGURES["warmup"]()
    (s256, r256), (s512, r512) = (line.get_data() for line in warmup.axes[0].lines[:2])
    assert abs(s512[np.argmax(r512)] - 4000) <= 10 and abs(s256[np.argmax(r256)] - 4000) <= 10
    np.testing.assert_allclose(np.asarray(r512) / np.asarray(r256), 2 ** -0.5, rtol=1e-12)
