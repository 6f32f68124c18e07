"""Serve tests' helpers: small random checkpoints and a real ``decoderkit serve`` process.

(A module, not a conftest.py: a second conftest would shadow tests/conftest.py, which other
tests import by that name.)"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

from decoderkit import make_model
from decoderkit.training.seq2seq.checkpoint import save_checkpoint
from decoderkit.text.seq2seq.tokenizer import Tokenizer

SRC = str(Path(__file__).resolve().parents[2] / "src")
CHARS = "0123456789 -/.,abcdefghijklmnopqrstuvwxyzADFJMNOSTW"
STARTUP_S = 60  # a loaded 2-core machine can take long to import torch


def random_checkpoint(directory, eos_bias: float = 0.0, max_len: int = 96):
    """A random 2+2-layer character model; ``eos_bias`` < 0 makes outputs run to max_len."""
    tok = Tokenizer.characters([CHARS])
    torch.manual_seed(0)
    model = make_model(tok.vocab_size, tok.vocab_size, N=2, d_model=16, d_ff=32, h=2,
                       dropout=0.0, max_len=max_len)
    with torch.no_grad():
        model.generator.proj.bias[tok.hf.token_to_id("<eos>")] += eos_bias
    return save_checkpoint(directory, model, tok, tok, step=7)


def varied_checkpoint(directory) -> Path:
    """Outputs of varied lengths: some stop at EOS, some run to the length bound."""
    return random_checkpoint(directory, eos_bias=1.0)


def slow_checkpoint(directory) -> Path:
    """Never stops early, long bound: a full request keeps the worker busy for a while."""
    return random_checkpoint(directory, eos_bias=-20.0, max_len=512)


def batching_server(directory) -> Server:
    """A server of the slow checkpoint: small wait, batches up to 64."""
    return Server(slow_checkpoint(directory), "--max-wait-ms", "20", "--max-batch", "64",
                  "--max-inputs", "64")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A ``decoderkit serve`` subprocess on a free loopback port (``checkpoint`` None: the
    flags name an export: --engine, --model)."""

    def __init__(self, checkpoint: Path | None, *flags: str):
        self.checkpoint, self.port = checkpoint, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env.pop("DECODERKIT_TOKEN", None)
        self.log = tempfile.TemporaryFile()  # not a pipe: a full pipe would stall the server
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "decoderkit", "serve",
             *(["--checkpoint", str(checkpoint)] if checkpoint else []),
             "--port", str(self.port), "--log-level", "warning", "--threads", "1", *flags],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_S
        while True:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"decoderkit serve exited: {self.log.read().decode()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("decoderkit serve did not answer /health in time")
            time.sleep(0.1)

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=10).json()

    def stop(self) -> int:
        """SIGTERM, then the exit status (killed after 30 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
