"""An opened LM carries its chat template: every kind of checkpoint (an lm train run, a Hugging
Face directory with chat_template.jinja or tokenizer_config.json's chat_template, a GGUF file's
tokenizer.chat_template) has it on ``LMCheckpoint.chat``, read once by its format, and where it
has none ``no_chat`` names where one would be; a broken template refuses only its use (lm
sample still opens the model); the CLI takes it from the checkpoint, never looks it up."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.text.lm.chat import TEMPLATE_FILE
from decoderkit.text.lm.tokenizer import LMTokenizer
from decoderkit.training.lm.checkpoint import save_lm_checkpoint

TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{{ eos_token }}{% endfor %}"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
CLI = Path(__file__).parents[3] / "src" / "decoderkit" / "cli"


def our_run(path: Path) -> Path:
    torch.manual_seed(0)
    tokenizer = LMTokenizer.characters("hello world")
    model = DecoderOnlyLM(LMConfig(vocab_size=tokenizer.vocab_size, n_layers=1, d_model=8,
                                   n_heads=2, d_ff=16, max_len=16, dropout=0.0))
    return save_lm_checkpoint(path, model, tokenizer, step=1)


def test_an_lm_train_run_has_none_until_its_directory_holds_one(tmp_path):
    run = our_run(tmp_path / "run")
    ckpt = load_checkpoint(run)
    assert ckpt.chat is None
    assert str(run) in ckpt.no_chat and TEMPLATE_FILE in ckpt.no_chat
    (run / TEMPLATE_FILE).write_text(TEMPLATE)
    ckpt = load_checkpoint(run)
    assert ckpt.chat.source == TEMPLATE and ckpt.chat is ckpt.chat  # read once


@pytest.mark.parametrize("in_config", [False, True])
def test_a_hugging_face_directory_has_transformers_template(tmp_path, in_config):
    transformers = pytest.importorskip("transformers")
    from text.lm.chat_dirs import CHATML, chat_directory

    directory = chat_directory(tmp_path / "hf", "chatml", in_config=in_config)
    assert (directory / TEMPLATE_FILE).exists() != in_config  # where transformers wrote it
    chat = load_checkpoint(directory).chat
    want = transformers.AutoTokenizer.from_pretrained(directory).apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=False)
    assert chat.source == CHATML and chat.render(MESSAGES) == want


def test_a_gguf_file_has_its_metadatas(tmp_path):
    from interop import gguf_helpers as h

    from decoderkit.interop.gguf.export import export_gguf

    lm, tokenizer = h.llama(), h.bpe_tokenizer()
    with_one = load_checkpoint(export_gguf(lm, tokenizer, tmp_path / "a", chat_template=TEMPLATE))
    assert with_one.chat.source == TEMPLATE
    assert with_one.chat.render(MESSAGES[1:]) == f"<user>hi{tokenizer.named.eos}"
    without = load_checkpoint(export_gguf(lm, tokenizer, tmp_path / "b"))
    assert without.chat is None and "has no tokenizer.chat_template" in without.no_chat


def test_a_broken_template_refuses_its_use_not_the_opening(tmp_path):
    run = our_run(tmp_path / "run")
    (run / TEMPLATE_FILE).write_text("{% for m in messages %}unclosed")
    ckpt = load_checkpoint(run)  # lm sample, lm eval: the model opens
    with pytest.raises(UsageError, match=re.escape(TEMPLATE_FILE)):
        _ = ckpt.chat


def test_the_cli_takes_the_template_from_the_checkpoint():
    """cli/serve.py, cli/lm/chat.py, cli/lm/export.py and cli/lm/tune.py looked it up on their
    --checkpoint (interop.chat_template); the import-linter contract forbids text.lm.chat."""
    finders = re.compile(r"ChatTemplate|no_template|chat_template\(|gguf_chat|text\.lm\.chat")
    found = [f"{p.relative_to(CLI)}:{i}" for p in sorted(CLI.rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if finders.search(line)]
    assert not found, found
