"""Each accepted range of ``base.checks`` is one rule at every boundary: the command line, the
HTTP schema and the library refuse the same value, each naming the same range."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from decoderkit.base.checks import BATCH, LENGTH_PENALTY, QUEUE, TEMPERATURE, WAIT_MS, WORK
from decoderkit.base.errors import UsageError
from decoderkit.cli import main
from decoderkit.generation.lm.row import Settings
from decoderkit.generation.seq2seq.translate import DecodeOptions
from decoderkit.interop.marian.hf import read_generation
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.serve.lm.limits import LMLimits
from decoderkit.serve.seq2seq.limits import ServeLimits
from decoderkit.serve.seq2seq.schema import request_model


def cli_refusal(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def library_refusal(make) -> str:
    with pytest.raises(UsageError) as refused:
        make()
    return str(refused.value)


def http_refusal(body: dict) -> str:
    with pytest.raises(ValidationError) as refused:
        request_model(ServeLimits()).model_validate({"inputs": ["a"], **body})
    return str(refused.value)


@pytest.mark.parametrize("value", ["101", "0", "-1"])
def test_temperature(value, capsys):
    said = TEMPERATURE.span
    assert said == "a finite number in (0, 100]"
    for argv in (["translate", "--checkpoint", "x", "--sample"], ["lm", "sample", "--checkpoint",
                                                                    "x", "--prompt", "a"]):
        err = cli_refusal([*argv, "--temperature", value], capsys)
        assert f"--temperature: expected {said}, got '{value}'" in err
    assert f"must be {said}, got {value}" in http_refusal(
        {"sampling": {"temperature": int(value)}})
    for make in (lambda: DecodeOptions(sample=True, temperature=int(value)),
                 lambda: Settings(4, temperature=int(value))):
        assert f"temperature must be {said}, got {value}" in library_refusal(make)


@pytest.mark.parametrize("value", ["11", "-1"])
def test_length_penalty(value, capsys, tmp_path):
    said = LENGTH_PENALTY.span
    assert said == "a finite number in [0, 10]"
    err = cli_refusal(["translate", "--checkpoint", "x", "--length-penalty", value], capsys)
    assert f"--length-penalty: expected {said}, got '{value}'" in err
    assert f"must be {said}, got {value}" in http_refusal({"length_penalty": int(value)})
    assert f"length_penalty must be {said}, got {value}" in library_refusal(
        lambda: DecodeOptions(beam=2, length_penalty=int(value)))
    assert f"config.json: length_penalty must be {said}, got {value}" in library_refusal(
        lambda: read_generation(tmp_path, ModelConfig(src_vocab=8, tgt_vocab=8),
                                {"length_penalty": int(value)}))  # a Marian directory's


@pytest.mark.parametrize("name,accepted,value,limits", [
    ("max_wait_ms", WAIT_MS, 60_001, (ServeLimits,)),
    ("max_queue", QUEUE, 0, (ServeLimits, LMLimits)),
    ("max_work_tokens", WORK, 1 << 21, (ServeLimits, LMLimits)),
    ("max_batch", BATCH, 4097, (ServeLimits, LMLimits)),
])
def test_server_limits(name, accepted, value, limits, capsys):
    """No HTTP field sets these: the serve flag and each server's limits dataclass."""
    flag = f"--{name.replace('_', '-')}"
    err = cli_refusal(["serve", "--checkpoint", "x", flag, str(value)], capsys)
    assert f"{flag}: expected {accepted.span}, got '{value}'" in err
    for cls in limits:
        assert f"{name} must be {accepted.span}, got {value}" in library_refusal(
            lambda cls=cls: cls(**{name: value}))
