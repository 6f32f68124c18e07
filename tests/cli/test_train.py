"""``decoderkit train`` flags that reach the model config: --tie-generator (the recipe for
small real data, docs/bible.md) shares the output layer with the target embedding."""

import json

from decoderkit.cli import main


def test_tie_generator_reaches_the_saved_config(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--task", "copy", "--out", str(out), "--layers", "1", "--d-model",
                 "16", "--heads", "2", "--d-ff", "32", "--train-size", "64", "--valid-size",
                 "8", "--batch-size", "16", "--max-steps", "2", "--warmup", "1",
                 "--tie-generator", "--quiet", "--show", "0", "--threads", "1"]) == 0
    assert json.loads((out / "config.json").read_text())["tie_generator"] is True
