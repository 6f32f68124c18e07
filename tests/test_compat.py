"""Nothing a user relies on breaks: every import path the README, docs/ and the notebooks
documented at commit 75f131b (before the family layout) still imports, and what that commit's
code wrote (an ``lm train`` run directory, a CTranslate2 export) still opens.

The fixtures were written by the code of 75f131b (``git worktree add /tmp/old 75f131b``,
``PYTHONPATH=/tmp/old/src``), never regenerated:

- ``lm_train_75f131b/run``: ``decoderkit lm train --text text.txt --out run --layers 1
  --d-model 16 --heads 2 --block-size 16 --batch-size 4 --max-steps 20 --eval-every 10
  --eval-blocks 4 --threads 1`` in ``lm_train_75f131b`` (its meta.json names ``../text.txt``);
- ``lm_export_hf_75f131b``: ``decoderkit lm export --to transformers --checkpoint
  lm_train_75f131b/run --out lm_export_hf_75f131b``;
- ``seq2seq_train_75f131b``: ``decoderkit train --task dates --out seq2seq_train_75f131b
  --layers 1 --d-model 8 --heads 2 --d-ff 16 --train-size 200 --valid-size 20 --max-steps 4
  --valid-every 2 --batch-size 8 --threads 1``;
- ``ct2_export_75f131b``: ``decoderkit export --checkpoint tests/fixtures/checkpoint_0.1
  --to ctranslate2 --out ct2_export_75f131b``.
"""

from __future__ import annotations

import importlib
import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from decoderkit.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
LM_RUN = FIXTURES / "lm_train_75f131b" / "run"
LM_HF = FIXTURES / "lm_export_hf_75f131b"
SEQ2SEQ_RUN = FIXTURES / "seq2seq_train_75f131b"
SEQ2SEQ_FLAGS = ["--layers", "1", "--d-model", "8", "--heads", "2", "--d-ff", "16",
                 "--train-size", "200", "--valid-size", "20", "--batch-size", "8"]
CT2_EXPORT = FIXTURES / "ct2_export_75f131b"

# Every import statement of the code blocks of README.md and docs/notebooks at 75f131b, and
# every dotted path its prose names (`decoderkit.interop.pretrained.load_pretrained(path)`),
# as the statement a user writes.
DOCUMENTED_IMPORTS = (
    "from decoderkit import beam_search, greedy_decode",
    "from decoderkit import load_checkpoint",
    "from decoderkit import make_model, padding_mask, target_mask",
    "from decoderkit import prepack",
    "from decoderkit.generation.compiled import compile_step",
    "from decoderkit.generation.limits import default_max_len",
    "from decoderkit.generation.translate import DecodeOptions",
    "from decoderkit.grade import grade",
    "from decoderkit.interop import from_torch, to_torch",
    "from decoderkit.interop.checkpoints import load_checkpoint",
    "from decoderkit.interop.engines import open_export",
    "from decoderkit.interop.onnx_runtime import OnnxRuntimeModel",
    "from decoderkit.interop.pretrained import load_pretrained",
    "from decoderkit.nn.embeddings import sinusoidal_encoding",
    "from decoderkit.nn.layers import AttentionRecord",
    "from decoderkit.nn.lm import DecoderOnlyLM, lm_preset",
    "from decoderkit.nn.masks import causal_mask, to_torch_mask",
    "from decoderkit.report.params import decoder_layer_parameters, encoder_layer_parameters",
    "import decoderkit.training.loop",
    "import decoderkit.training.spm_tokenizer",
)

# Modules that moved into a family subpackage, kept at their old path as the moved module itself
# (where each lives now: nn and text by family, issue 41).
MOVED = {
    "decoderkit.nn.model": "decoderkit.nn.seq2seq.model",
    "decoderkit.training.checkpoint": "decoderkit.training.seq2seq.checkpoint",
    "decoderkit.training.data": "decoderkit.training.seq2seq.data",
    "decoderkit.training.tasks": "decoderkit.training.seq2seq.tasks",
    "decoderkit.training.tokenizer": "decoderkit.text.seq2seq.tokenizer",
    "decoderkit.training.spm_tokenizer": "decoderkit.text.seq2seq.spm_tokenizer",
    "decoderkit.training.lm_checkpoint": "decoderkit.training.lm.checkpoint",
    "decoderkit.training.lm_data": "decoderkit.training.lm.data",
    "decoderkit.training.lm_objective": "decoderkit.training.lm.objective",
}


@pytest.mark.parametrize("statement", DOCUMENTED_IMPORTS)
def test_every_documented_import_still_imports(statement):
    namespace: dict = {}
    exec(statement, namespace)  # the line a user wrote
    if statement.startswith("from "):
        names = statement.split(" import ")[1].split(", ")
        assert all(namespace[name] is not None for name in names)


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_an_old_module_path_is_the_moved_module_itself(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_an_lm_train_directory_of_75f131b_opens_with_its_weights():
    from decoderkit.interop.pretrained import load_pretrained
    from decoderkit.nn.lm import DecoderOnlyLM, LMConfig

    model, tokenizer = load_pretrained(LM_RUN)
    config = LMConfig.from_dict(json.loads((LM_RUN / "config.json").read_text()))
    assert model.config == config
    saved = load_file(LM_RUN / "model.safetensors")
    state = model.state_dict()
    for key, tensor in saved.items():
        assert torch.equal(state[key], tensor), key
    text = (LM_RUN.parent / "text.txt").read_text(encoding="utf-8")
    assert tokenizer.decode(tokenizer.encode(text[:200])) == text[:200]
    peer = DecoderOnlyLM(config).eval()  # built from the files alone
    peer.load_state_dict(saved, strict=False)
    ids = torch.tensor([tokenizer.encode("To be, or not")])
    with torch.no_grad():
        assert torch.equal(model(ids), peer(ids))


def test_the_lm_commands_run_on_an_lm_train_directory_of_75f131b(tmp_path, capsys):
    text = LM_RUN.parent / "text.txt"
    assert main(["lm", "eval", "--checkpoint", str(LM_RUN), "--text", str(text)]) == 0
    assert "perplexity" in capsys.readouterr().out
    assert main(["lm", "sample", "--checkpoint", str(LM_RUN), "--prompt", "To be",
                 "--greedy", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("To be")
    # resuming needs trainer.pt's optimiser state and the recorded text checksum
    run = tmp_path / "copy"
    shutil.copytree(LM_RUN.parent, run)
    assert main(["lm", "train", "--resume", "--text", str(run / "text.txt"), "--out",
                 str(run / "run"), "--layers", "1", "--d-model", "16", "--heads", "2",
                 "--block-size", "16", "--batch-size", "4", "--max-steps", "22",
                 "--eval-every", "2", "--eval-blocks", "4", "--threads", "1", "--quiet"]) == 0
    assert "after 22 steps" in capsys.readouterr().out


def test_a_transformers_export_of_75f131b_opens_as_the_run_it_came_from():
    from decoderkit.interop.pretrained import load_pretrained

    run, run_tokenizer = load_pretrained(LM_RUN)
    export, tokenizer = load_pretrained(LM_HF)
    assert export.config == run.config
    ids = torch.tensor([run_tokenizer.encode("To be, or not")])
    assert tokenizer.encode("To be, or not") == ids[0].tolist()
    with torch.no_grad():
        assert torch.equal(export(ids), run(ids))  # the same weights, the same model code


def test_a_translation_run_of_75f131b_opens_evaluates_translates_and_resumes(tmp_path, capsys):
    from decoderkit import load_checkpoint
    from decoderkit.nn.encoder_decoder import ModelConfig

    ckpt = load_checkpoint(SEQ2SEQ_RUN)  # its meta.json's checksums verified
    assert ckpt.config == ModelConfig.from_dict(json.loads((SEQ2SEQ_RUN / "config.json")
                                                           .read_text()))
    saved = load_file(SEQ2SEQ_RUN / "model.safetensors")
    state = ckpt.model.state_dict()
    assert all(torch.equal(state[key], tensor) for key, tensor in saved.items())
    assert main(["eval", "--checkpoint", str(SEQ2SEQ_RUN)]) == 0
    assert "BLEU" in capsys.readouterr().out
    assert main(["translate", "--checkpoint", str(SEQ2SEQ_RUN), "29 Nov 2026"]) == 0
    capsys.readouterr()
    run = tmp_path / "run"
    shutil.copytree(SEQ2SEQ_RUN, run)
    assert main(["train", "--task", "dates", "--out", str(run), "--resume", *SEQ2SEQ_FLAGS,
                 "--max-steps", "6", "--valid-every", "2", "--threads", "1", "--quiet"]) == 0
    assert json.loads((run / "meta.json").read_text())["step"] == 6


def test_a_ctranslate2_export_of_75f131b_translates_as_a_fresh_export(tmp_path):
    pytest.importorskip("ctranslate2")
    from decoderkit import load_checkpoint
    from decoderkit.generation.translate import DecodeOptions
    from decoderkit.interop.ctranslate2 import export_ctranslate2
    from decoderkit.interop.engines import open_export

    old = open_export("ctranslate2", CT2_EXPORT)  # its manifest's checksums verified
    ckpt = load_checkpoint(FIXTURES / "checkpoint_0.1")  # what it was exported from
    assert old.config == ckpt.config
    export_ctranslate2(ckpt, tmp_path / "fresh")
    fresh = open_export("ctranslate2", tmp_path / "fresh")
    lines = ["29 Nov 2026", "2026", "", "1 2 3"]
    for options in (DecodeOptions(), DecodeOptions(beam=4)):
        got = old.translate_lines(lines, options)
        want = fresh.translate_lines(lines, options)
        assert [r.tokens for r in got] == [r.tokens for r in want]
        assert [r.score for r in got] == [r.score for r in want]


@pytest.mark.parametrize("path,model", [
    (FIXTURES / "checkpoint_0.1", "EncoderDecoder"), (SEQ2SEQ_RUN, "EncoderDecoder"),
    (LM_RUN, "DecoderOnlyLM"), (LM_HF, "DecoderOnlyLM"),
], ids=lambda v: v.name if isinstance(v, Path) else v)
def test_the_one_opener_opens_what_earlier_versions_wrote(path, model):
    import decoderkit

    ckpt = decoderkit.load_checkpoint(path)
    assert type(ckpt.model).__name__ == model
    assert not ckpt.model.training


# Every module of the tree at 80bad27 (before each family had its folder in every layer), and
# the public names of those whose path is now a package or that lost names to a family module.
MODULES_80BAD27 = (FIXTURES / "modules_80bad27.txt").read_text().split()
NAMES_80BAD27 = {
    "decoderkit.generation.lm": ["check_prompts", "generate", "OnStep"],
    "decoderkit.interop.marian": ["is_marian_directory", "read_config", "weight_names",
                                  "build_model", "read_tokenizers", "read_generation",
                                  "load_marian", "ORIGIN"],
    "decoderkit.interop.ctranslate2": ["check_expressible", "build_spec", "export_ctranslate2",
                                       "Ctranslate2Engine", "ENGINE", "QUANTIZATIONS"],
    "decoderkit.interop.onnx": ["EncoderGraph", "DecoderStepGraph", "export_graphs",
                                "export_onnx", "ENGINE", "OPSET"],
    "decoderkit.generation.limits": ["default_max_len", "banned_ids", "restrict", "last_step",
                                     "row_limits", "check_length_penalty", "check_temperature"],
    "decoderkit.nn.lm": ["DecoderOnlyLM", "LMConfig", "lm_preset", "PRESETS", "ffn_width"],
}


@pytest.mark.parametrize("name", MODULES_80BAD27)
def test_every_module_of_80bad27_still_imports(name):
    assert importlib.import_module(name).__name__.startswith("decoderkit")


@pytest.mark.parametrize("module,names", sorted(NAMES_80BAD27.items()))
def test_the_names_of_80bad27_modules_still_import(module, names):
    namespace: dict = {}
    exec(f"from {module} import {', '.join(names)}", namespace)
    assert all(callable(namespace[n]) or isinstance(namespace[n], (str, int, tuple))
               for n in names)
    assert not hasattr(importlib.import_module(module), "no_such_name")  # not every name


def test_every_old_path_of_the_moved_table_is_the_module_itself():
    from decoderkit.base.moved import MOVED as TABLE

    assert set(MOVED.items()) <= set(TABLE.items())  # 0.1's moves kept
    for old, new in TABLE.items():
        assert importlib.import_module(old) is importlib.import_module(new), old


@pytest.mark.parametrize("old", sorted(__import__("decoderkit.base.moved").base.moved.MOVED))
def test_an_old_path_imports_as_the_moved_module_with_a_warning_naming_the_new(old, monkeypatch):
    from decoderkit.base.moved import MOVED as TABLE

    new = TABLE[old]
    monkeypatch.delitem(sys.modules, old, raising=False)  # imported afresh, as a user's first
    with pytest.warns(DeprecationWarning, match=re.escape(new)):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def _names_moved() -> list[tuple[str, str, str]]:
    """(module path, name, where it is now) for every name ``NAMES_MOVED`` forwards (of a module
    forwarding all names: those of ``NAMES_80BAD27``)."""
    from decoderkit.base.moved import NAMES_MOVED

    found = []
    for module, moved in NAMES_MOVED.items():
        if isinstance(moved, dict):
            found += [(module, name, target) for name, target in moved.items()]
        else:
            found += [(module, name, moved) for name in NAMES_80BAD27[module]]
    # a name the module still imports for its own use is its own attribute: nothing forwarded
    return [(m, name, home) for m, name, home in found
            if name not in vars(importlib.import_module(m))]


@pytest.mark.parametrize("module,name,home", _names_moved())
def test_a_moved_name_is_the_same_object_with_a_warning_naming_its_module(module, name, home):
    home, _, new = home.partition(":")  # "module:NEW": renamed as it moved
    with pytest.warns(DeprecationWarning, match=re.escape(f"{home}.{new or name}")):
        found = getattr(importlib.import_module(module), name)
    assert found is getattr(importlib.import_module(home), new or name)


def _stale_forms():
    """Each moved path as code or prose would name it: dotted (``training.lm.chat``, with or
    without ``decoderkit.``), as a file (``training/lm/chat.py``) and a moved name
    (``nn.layers.LayerNorm``)."""
    from decoderkit.base.moved import MOVED as TABLE, NAMES_MOVED

    def dotted(path: str) -> re.Pattern:
        return re.compile(r"(?<![\w./])(?:decoderkit\.)?" + re.escape(path) + r"(?!\w)")

    for old in TABLE:
        short = old.removeprefix("decoderkit.")
        yield old, dotted(short)
        yield old, re.compile(r"(?<![\w./])" + re.escape(short.replace(".", "/")) + r"\.py")
    for module, moved in NAMES_MOVED.items():
        for name in moved if isinstance(moved, dict) else ():
            yield f"{module}.{name}", dotted(module.removeprefix("decoderkit.") + "." + name)


def test_no_code_docstring_or_comment_in_src_names_a_moved_path():
    source = Path(__file__).resolve().parents[1] / "src" / "decoderkit"
    forms = list(_stale_forms())
    stale = [f"{path.relative_to(source)}:{number}: {old}"
             for path in sorted(source.rglob("*.py")) if path != source / "base" / "moved.py"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for old, form in forms if form.search(line)]
    assert len(forms) > 100 and not stale, "\n".join(["old paths named (use the new):", *stale])
