"""LM serve tests' helpers: a small random GPT-2-shaped LM with a byte-level BPE tokenizer,
and its app served by uvicorn in a thread on a free 127.0.0.1 port (a module, not a conftest:
see tests/serve/serving.py)."""

from __future__ import annotations

import threading
import time

import torch
import uvicorn

from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.serve.server import bind
from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer

TEXT = ("The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
        "To be, or not to be, that is the question. All that glitters is not gold. ") * 20


def tiny_lm(seed: int = 0, context: int = 64) -> tuple[DecoderOnlyLM, LMTokenizer]:
    """A 2-layer float32 LM over a 300-token BPE plus <|endoftext|>, its matrices 8x their
    initialisation (varied, decided continuations)."""
    tokenizer = LMTokenizer.train_bpe([TEXT], 300)
    tokenizer.hf.add_special_tokens([END_OF_TEXT])
    torch.manual_seed(seed)
    model = DecoderOnlyLM(LMConfig(vocab_size=tokenizer.vocab_size, n_layers=2, d_model=32,
                                   n_heads=4, d_ff=64, max_len=context, dropout=0.0)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0 if p.dim() > 1 else 1.0)
    return model, tokenizer


class LiveServer:
    """``app`` under uvicorn in a thread on 127.0.0.1 (a with-block)."""

    def __init__(self, app):
        self.app = app
        self.sock = bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs=dict(sockets=[self.sock]))

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the LM server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.sock.close()
