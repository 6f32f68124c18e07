"""A fine-tuned GPT-2-shaped classifier (``lm finetune``) written as a Hugging Face
``GPT2ForSequenceClassification`` directory with the same logits, and such a directory opened
as a ``GPTClassifier``.

Pooling, where the two differ: decoderkit's head reads the final state at GPT-1's extract
token; HF's reads the last token that is not ``pad_token_id`` (the last one when there is no
pad id). The export sets ``pad_token_id`` to the start token, which the input transformation
puts only at position 0 and uses as right padding, so on inputs built by ``transform`` (start,
text, extract, padding) HF pools the extract token: equal logits. Inputs made otherwise differ:
a text without the start/extract tokens (HF pools its last token, decoderkit refuses nothing
but reads the wrong place), or a start-token id inside the text. A directory that is not our
export (no manifest) has no extract token: it is opened with no input transformation, reading
the last token of the text as HF does, and its missing LM head is the tied embedding (a
classifier never uses it).

Legend: d = n_embd, C = num_labels.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.interop.artifacts import MANIFEST
from decoderkit.interop.gpt.hf import (
    CONFIG,
    GPT2,
    check_exportable,
    gpt2_config,
    gpt2_tensors,
    read_hf_config,
    read_tokenizer,
    weight_names,
)
from decoderkit.interop.huggingface import read_json, weights_file
from decoderkit.interop.lm.export import write_lm_directory
from decoderkit.nn.lm.classifier import ClassifierConfig, GPTClassifier, check_label_count
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.weights import NameMap, Source, load_file
from decoderkit.text.lm.tokenizer import LMTokenizer

ARCHITECTURE = "GPT2ForSequenceClassification"
HEAD = "score.weight"  # HF's (C, d) bias-free linear: our head.weight


def export_classifier(model: GPTClassifier, tokenizer: LMTokenizer | None, out: str | Path,
                      overwrite: bool = False) -> Path:
    """Write ``out``: a GPT2ForSequenceClassification directory (transformer.* and
    score.weight, labels as id2label, pad_token_id = the start token), tokenizer.json when
    given, and decoderkit's manifest holding the ClassifierConfig; atomically."""
    if not isinstance(model, GPTClassifier):
        raise TypeError(f"model must be a GPTClassifier, got {type(model).__name__}")
    check_classifier_exportable(model.lm.config)
    tensors = {k: v for k, v in gpt2_tensors(model.lm).items() if k != "lm_head.weight"}
    tensors[HEAD] = model.head.weight.detach().to("cpu").contiguous().clone()
    head = model.config
    labels = dict(enumerate(head.labels))
    hf_config = gpt2_config(model.lm, tokenizer) | {
        "architectures": [ARCHITECTURE], "id2label": {str(i): x for i, x in labels.items()},
        "label2id": {x: i for i, x in labels.items()}, "pad_token_id": head.start_id,
        "problem_type": "single_label_classification"}
    manifest = {"engine": "transformers", "config": model.lm.config.to_dict(),
                "classifier": head.to_dict()}
    return write_lm_directory(out, overwrite, tensors, hf_config, tokenizer, manifest,
                              context=model.lm.config.max_len, generation=None)


def check_classifier_exportable(config) -> None:
    """Refuse, saying what the classifier is and what can be done, one whose LM
    GPT2ForSequenceClassification cannot hold (a Llama-family one: RoPE, RMSNorm, a gated
    FFN); decoderkit writes no other classifier directory."""
    if config.positions == "rope" or config.norm == "rms" or config.ffn == "gated":
        raise UsageError(
            f"this classifier's LM is Llama-family (positions={config.positions!r}, norm="
            f"{config.norm!r}, ffn={config.ffn!r}); --to transformers writes classifiers as "
            f"{ARCHITECTURE}, which holds GPT-2-shaped LMs only, and decoderkit writes no "
            "Llama classifier directory: use the run directory itself with decoderkit lm "
            "classify or lm eval --data")
    check_exportable(config)


def is_hf_classifier(directory: str | Path) -> bool:
    """True if ``directory``'s config.json names GPT2ForSequenceClassification."""
    file = Path(directory) / CONFIG
    try:
        raw = read_json(file)
    except UsageError:
        return False
    return isinstance(raw, dict) and ARCHITECTURE in (raw.get("architectures") or ())


def load_hf_classifier(directory: str | Path) -> tuple[GPTClassifier, LMTokenizer | None]:
    """(classifier in eval mode, tokenizer or None) of a GPT2ForSequenceClassification
    directory; our export's manifest restores the extract token (see the module doc)."""
    directory = Path(directory)
    config, kind = read_hf_config(directory)
    raw = read_json(directory / CONFIG)
    if kind != GPT2 or not is_hf_classifier(directory):
        raise UsageError(f"{directory / CONFIG}: not a {ARCHITECTURE} (architectures "
                         f"{raw.get('architectures')!r})")
    head = _classifier_config(directory, raw)
    config = dataclasses.replace(config, tie_head=True)
    lm = weight_names(config, GPT2)
    names = NameMap({f"lm.{k}": v for k, v in lm.params.items()} | {"head.weight":
                                                                    Source((HEAD,))},
                    strip=lm.strip, ignored_suffixes=lm.ignored_suffixes,
                    ignored=frozenset({"lm_head.weight"}))
    model = load_file(config, lambda c: GPTClassifier(DecoderOnlyLM(c), head),
                      weights_file(directory), names, CONFIG, follow_dtype=True)
    return model.eval(), read_tokenizer(directory, model.lm.config, kind)


def _classifier_config(directory: Path, raw: dict) -> ClassifierConfig:
    """The ClassifierConfig of our export's manifest, else labels from id2label (HF's
    LABEL_i where it has none) with no input transformation (HF's last-token pooling)."""
    manifest = directory / MANIFEST
    if manifest.is_file():
        saved = read_json(manifest)
        if isinstance(saved, dict) and isinstance(saved.get("classifier"), dict):
            try:
                return ClassifierConfig.from_dict(saved["classifier"])
            except (UsageError, TypeError) as err:
                raise UsageError(f"{manifest}: {err}") from None
    id2label = raw.get("id2label") or {}
    n = len(id2label) or raw.get("num_labels", 2)  # transformers leaves out its default 2
    if isinstance(n, int):  # before a name is made for each
        check_label_count(n, f"{directory / CONFIG}: id2label/num_labels")
    try:
        return ClassifierConfig(tuple(str(id2label.get(str(i), f"LABEL_{i}"))
                                      for i in range(n)))
    except (TypeError, UsageError) as err:
        raise UsageError(f"{directory / CONFIG}: id2label {json.dumps(id2label)[:80]} does "
                         f"not name labels 0..n-1 ({err})") from None
