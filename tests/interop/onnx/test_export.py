"""ONNX export, run by ONNX Runtime under our own search: our tokens wherever float32 rounding
cannot decide otherwise."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    FLOAT32_ENGINES,
    assert_tokens_agree_where_decided,
    beam_margins,
    generation_margins,
    translation_margins,
)
from interop.export_helpers import random_checkpoint, random_lines

from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.decoding import greedy_decode
from decoderkit.generation.seq2seq.translate import DecodeOptions, translate_lines
from decoderkit.interop.onnx.export import export_onnx
from decoderkit.interop.onnx.runtime import load_onnx

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

# @pytest.mark.engines: the tests that compare two engines or precisions, rerun under
# AVX2 by `make test` (the others check files, messages and refusals)

# (norm_first, tied, EOS bias giving a mix of EOS and max_len stops): both norms, both tyings
CONFIGS = [(False, False, 2.0), (True, True, 3.0)]


@pytest.fixture(scope="module", params=CONFIGS, ids=["post-norm-untied", "pre-norm-tied"])
def exported(request, tmp_path_factory):
    """(checkpoint, its export loaded in ONNX Runtime): one export per config, ~10 s each."""
    norm_first, tied, eos_bias = request.param
    root = tmp_path_factory.mktemp("onnx")
    ckpt = random_checkpoint(root / "ckpt", norm_first=norm_first, tied=tied, eos_bias=eos_bias)
    export_onnx(ckpt, root / "onnx")
    return ckpt, load_onnx(root / "onnx", threads=1)


@pytest.mark.engines
@pytest.mark.parametrize("beam", [1, 4])
def test_same_tokens_where_decided(exported, beam):
    """Greedy: every step the rounding cannot flip; beam: the returned hypothesis where the
    best and second scores are decided."""
    ckpt, export = exported
    lines = random_lines()
    ours = translate_lines(ckpt, lines, DecodeOptions(beam=beam, explain=2 if beam == 1 else 0,
                                                      n_best=1 if beam == 1 else 2),
                           batch_size=7)  # padded batches of 7
    theirs = export.translate_lines(lines, DecodeOptions(beam=beam), batch_size=7)
    assert {r.stop_reason for r in ours} == {"eos", "max_len"}
    if beam == 1:
        assert_tokens_agree_where_decided([r.tokens for r in ours], [r.tokens for r in theirs],
                                          translation_margins(ours), FLOAT32_ENGINES,
                                          at_least=30)
    else:
        assert_tokens_agree_where_decided([[r.text] for r in ours], [[r.text] for r in theirs],
                                          beam_margins(ours), FLOAT32_ENGINES, at_least=30)
    for a, b in zip(ours, theirs, strict=True):
        if a.text == b.text:  # else parted where the rounding may decide either way
            assert a.stop_reason == b.stop_reason and b.score == pytest.approx(a.score, rel=1e-4)


@pytest.mark.engines
def test_step_logprobs_match_pytorch(exported):
    """The decoder-step graph against the eager model, through the cache, to float32 noise."""
    ckpt, export = exported
    src = torch.tensor([[5, 6, 7, 8, 0], [9, 10, 11, 12, 13]])  # one padded row
    ours = greedy_decode(ckpt.model, src, None, max_len=12, explain=2)
    theirs = greedy_decode(export.model, src, None, max_len=12, step=export.model.step)
    decided_rows = assert_tokens_agree_where_decided(
        ours.tokens.tolist(), theirs.tokens.tolist(), generation_margins(ours), FLOAT32_ENGINES,
        at_least=1)
    if decided_rows == 2:
        assert torch.allclose(theirs.scores, ours.scores, atol=1e-4)


def test_engine_needs_its_own_step_and_cache(exported):
    _, export = exported
    src = torch.tensor([[5, 6, 7]])
    with pytest.raises(UsageError, match="step=model.step"):
        greedy_decode(export.model, src, None, max_len=4)
    with pytest.raises(UsageError, match="use_cache=True"):
        greedy_decode(export.model, src, None, max_len=4, use_cache=False,
                      step=export.model.step)
    with pytest.raises(UsageError, match="explain"):
        export.translate_lines(["12"], DecodeOptions(explain=2))


def test_graph_inputs_and_outputs_are_dynamic(exported):
    _, export = exported
    dec = export.model.decoder
    shapes = {i.name: i.shape for i in dec.get_inputs()}
    assert shapes["self_keys"][1] == "batch" and isinstance(shapes["self_keys"][3], str)
    assert isinstance(shapes["cross_keys"][3], str) and isinstance(shapes["src_mask"][2], str)
    assert shapes["positions"] == [1, 1]
    assert [o.name for o in dec.get_outputs()] == ["logprobs", "new_keys", "new_values"]


def test_the_step_writes_each_layers_keys_and_values_once(exported, tmp_path):
    """Each layer's step keys and values are one ScatterND each into that layer's buffer;
    written into slices of one stacked buffer, every layer also scattered its whole buffer
    back into the stack (ScatterElements with an index per element): ONNX Runtime's
    decoding then ran 0.28-0.48x as fast (benchmarks/generate.py)."""
    onnx = pytest.importorskip("onnx")
    ckpt, _ = exported
    export_onnx(ckpt, tmp_path / "onnx")
    graph = onnx.load(str(tmp_path / "onnx" / "decoder_step.onnx")).graph
    scatters = [n.op_type for n in graph.node if n.op_type.startswith("Scatter")]
    assert scatters == ["ScatterND"] * 2 * ckpt.model.config.n_layers, scatters


def test_a_damaged_graph_is_one_line_naming_it(exported, tmp_path):
    import json
    import shutil

    from decoderkit.base.files import file_sha256
    from decoderkit.interop.artifacts import MANIFEST

    ckpt, _ = exported
    out = shutil.copytree(ckpt.path.parent / "onnx", tmp_path / "onnx")  # the fixture's export
    graph = out / "decoder_step.onnx"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    with pytest.raises(UsageError, match="decoder_step.onnx: checksum mismatch"):
        load_onnx(out)
    graph.write_bytes(b"not a protobuf at all")  # and with a manifest made to agree:
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["sha256"]["decoder_step.onnx"] = file_sha256(graph)
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(UsageError) as caught:
        load_onnx(out)
    assert f"{graph}: ONNX Runtime cannot load this graph" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_swapped_graphs_or_an_edited_config_are_named_with_both_values(exported, tmp_path,
                                                                       capsys):
    import json
    import shutil

    from interop.test_artifacts import reseal

    from decoderkit.cli import main
    from decoderkit.interop.artifacts import MANIFEST

    ckpt, _ = exported
    out = shutil.copytree(ckpt.path.parent / "onnx", tmp_path / "onnx")
    (out / "encoder.onnx").rename(out / "swap")
    (out / "decoder_step.onnx").rename(out / "encoder.onnx")
    (out / "swap").rename(out / "decoder_step.onnx")
    reseal(out)  # checksums updated: only the content check can tell
    assert main(["translate", "--engine", "onnxruntime", "--model", str(out), "12"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == (f"decoderkit translate: error: {out / 'encoder.onnx'}: a graph of tokens, "
                    "positions, src_mask, cross_keys, cross_values, self_keys, self_values, "
                    "logprobs, new_keys, new_values, not the encoder graph of src, src_mask, "
                    "cross_kv (graphs swapped, or from another export?)"), line
    out = shutil.copytree(ckpt.path.parent / "onnx", tmp_path / "edited")
    manifest = json.loads((out / MANIFEST).read_text())
    c = dict(manifest["config"])
    manifest["config"]["n_layers"] += 1
    (out / MANIFEST).write_text(json.dumps(manifest))
    heads, d_k = c["n_heads"], c["d_model"] // c["n_heads"]
    with pytest.raises(UsageError, match=(
            rf"encoder.onnx: the graph's cross_kv has the shape \(\*, {2 * c['n_layers']}, "
            rf"{heads}, \*, {d_k}\), but the config in {MANIFEST} gives \(\*, "
            rf"{2 * c['n_layers'] + 2}, {heads}, \*, {d_k}\)$")):
        load_onnx(out)
