"""Every reader of a foreign or user-given file checks it first (``base.files.check_input_file``:
a regular file, of a bounded size), so a named pipe, a device or a huge file is one line naming
it, never a hang or a MemoryError. One case per reader; each call under a 10 s alarm, so a
regression fails instead of blocking the suite."""

from __future__ import annotations

import os
import signal

import pytest

from decoderkit.base.errors import UsageError


def lm_tokenizer(path):
    from decoderkit.text.lm.tokenizer import LMTokenizer

    return LMTokenizer.load(path)


def seq2seq_tokenizer(path):
    from decoderkit.text.seq2seq.tokenizer import Tokenizer

    return Tokenizer.load(path)


def lm_text(path):
    from decoderkit.training.lm.data import read_text

    return read_text(path)


def nanogpt_meta(path):
    from decoderkit.interop.gpt.nanogpt import read_meta

    return read_meta(path, 65)


def gpt2_vocab(path):
    from decoderkit.text.lm.tokenizer import LMTokenizer

    merges = path.with_name("merges.txt")
    merges.write_text("#version: 0.2\n")
    return LMTokenizer.byte_level(path, merges)


READERS = [lm_tokenizer, seq2seq_tokenizer, lm_text, nanogpt_meta, gpt2_vocab]


@pytest.fixture
def alarm():
    def hung(signum, frame):
        raise AssertionError("the reader blocked")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("read", READERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_pipe_a_folder_or_a_device_is_one_line_naming_it(tmp_path, alarm, read, kind):
    path = tmp_path / "vocab.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(UsageError) as caught:
        read(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message
    assert {"fifo": "named pipe", "directory": "directory", "device": "character device"}[
        kind] in message


@pytest.mark.parametrize("read", READERS, ids=lambda f: f.__name__)
def test_a_huge_sparse_file_is_refused_before_it_is_read(tmp_path, alarm, read):
    path = tmp_path / "vocab.json"
    with open(path, "wb") as f:
        f.truncate(10 << 30)  # 10 GB, no blocks on disk
    with pytest.raises(UsageError, match="bytes, more than"):
        read(path)
