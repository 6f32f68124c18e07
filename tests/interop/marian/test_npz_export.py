"""``export --to marian``: a model read from Marian's ``model.npz`` is written back as Marian's
own files, tensor for tensor what Marian wrote, and Marian's ``Translator`` loads it; after
``train --resume`` fine-tuning (the start row kept zero) Marian's greedy output on the export
equals ours on the checkpoint. What Marian cannot hold is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.cli import main
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.marian.npz import MODEL, OPTIONS
from decoderkit.interop.marian.npz_export import export_marian
from interop.marian_npz_helpers import agree, held_out, marian_outputs, our_outputs, trained

pytest.importorskip("pymarian", reason="pymarian is not installed (pip install pymarian): "
                    "Marian's own models cannot be trained or run here")


@pytest.fixture(scope="session")
def marian_cache(request):
    return request.config.cache.mkdir("marian-npz-models")  # test_marian_npz's models


@pytest.mark.parametrize("name", ["post-tied-all-joint-swish", "post-untied-separate-swish",
                                  "pre-tied-separate-relu-tgt-larger",
                                  "post-untied-separate-relu-src-larger"])
def test_a_marian_model_exports_as_the_tensors_marian_wrote(marian_cache, tmp_path, name):
    original = trained(marian_cache, name)
    out = export_marian(load_checkpoint(original), tmp_path / "m")
    theirs, ours = np.load(original / MODEL), np.load(out / MODEL)
    assert sorted(theirs.files) == sorted(ours.files)
    for key in theirs.files:
        if key != OPTIONS:
            assert theirs[key].dtype == ours[key].dtype and np.array_equal(theirs[key],
                                                                           ours[key]), key
    lines = held_out()[:40]
    assert marian_outputs(out, lines, beam=1) == marian_outputs(original, lines, beam=1)


@pytest.mark.parametrize("name", ["post-tied-all-joint-swish",
                                  "post-untied-separate-relu-src-larger"])
def test_fine_tuned_marian_model_exports_and_translates_as_ours(marian_cache, tmp_path, name):
    original = trained(marian_cache, name)
    tuned = tmp_path / "tuned"
    assert main(["convert", "--from", "marian-npz", str(original), "--out", str(tuned)]) == 0
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{' '.join(reversed(s.split()))}\n" for s in held_out()))
    assert main(["train", "--resume", "--out", str(tuned), "--data", str(tsv), "--max-steps",
                 "3", "--batch-size", "16", "--valid-size", "20", "--threads", "1",
                 "--quiet", "--show", "0"]) == 0
    ckpt = load_checkpoint(tuned)
    before = load_checkpoint(original).model.state_dict()
    after = ckpt.model.state_dict()
    assert not torch.equal(before["encoder.layers.0.ffn.w_1.weight"],
                           after["encoder.layers.0.ffn.w_1.weight"])  # it did train
    c = ckpt.config
    assert after["tgt_embed.lut.weight"][c.pad_id].abs().max() == 0  # the start row kept
    assert after["src_embed.lut.weight"][c.source_pad_id].abs().max() == 0
    assert main(["export", "--checkpoint", str(tuned), "--to", "marian", "--out",
                 str(tmp_path / "m")]) == 0
    lines = held_out()[:60]
    ours = our_outputs(ckpt, lines, beam=1)
    theirs = marian_outputs(tmp_path / "m", lines, beam=1)
    assert sum(agree(o, t) for o, t in zip(ours, theirs, strict=True)) >= 0.95 * len(lines)


def test_what_marian_cannot_hold_is_refused_by_name(marian_cache, tmp_path, capsys):
    ckpt = load_checkpoint(trained(marian_cache, "post-tied-all-joint-swish"))
    ckpt.model.tgt_embed.lut.weight.data[ckpt.config.pad_id] += 1.0
    with pytest.raises(UsageError, match="_embed.lut.weight row 200 .* is not zero"):
        export_marian(ckpt, tmp_path / "m")
    run = tmp_path / "ours"
    assert main(["train", "--task", "copy", "--out", str(run), "--layers", "1", "--d-model",
                 "16", "--heads", "2", "--d-ff", "32", "--train-size", "64", "--valid-size",
                 "8", "--batch-size", "16", "--max-steps", "1", "--quiet", "--show", "0"]) == 0
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(run), "--to", "marian", "--out",
                 str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--to marian needs sentencepiece" in err
    assert not (tmp_path / "x").exists() and not (tmp_path / "m").exists()
