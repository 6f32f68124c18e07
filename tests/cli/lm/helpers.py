"""What the ``decoderkit lm`` tests share (import as ``from cli.lm.helpers import ...``)."""

from pathlib import Path

from decoderkit.cli import main

HAMLET = Path(__file__).parents[2] / "fixtures" / "shakespeare_hamlet.txt"
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--block-size", "16",
        "--batch-size", "8", "--warmup", "2", "--eval-blocks", "16", "--quiet"]


def one_line(capsys, argv) -> str:
    """Run ``decoderkit ARGV``: exit 2 and one stderr line, no traceback; that line."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err
