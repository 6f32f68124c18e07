"""The ``decoderkit lm`` tests' fixtures: a text and a run trained on it, each made once."""

import pytest

from cli.lm.helpers import HAMLET, TINY
from decoderkit.cli import main


@pytest.fixture(scope="session")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "hamlet.txt"
    path.write_text(HAMLET.read_text()[:30000])
    return path


@pytest.fixture(scope="session")
def run(text, tmp_path_factory):
    """A 30-step run on ``text`` (TINY shape, 16-token context), trained once."""
    out = tmp_path_factory.mktemp("runs") / "run"
    assert main(["lm", "train", "--text", str(text), "--out", str(out), *TINY,
                 "--max-steps", "30", "--eval-every", "30", "--eval-blocks", "100000"]) == 0
    return out
