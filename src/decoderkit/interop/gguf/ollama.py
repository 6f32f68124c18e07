"""Ollama's model store: a name such as ``smollm2:135m`` found as the GGUF file Ollama pulled.

Ollama keeps each model as blobs named by their sha256 (``MODELS/blobs/sha256-HEX``) and a
manifest per name and tag (``MODELS/manifests/registry.ollama.ai/library/NAME/TAG``; a user's
model ``user/name``, another registry ``host/ns/name``), whose layer of media type
``application/vnd.ollama.image.model`` is the GGUF file. ``MODELS`` is ``$OLLAMA_MODELS``, else
``~/.ollama/models``; it is looked in only for a name that is no path on disk, only when its
manifests directory exists, and only for a name of Ollama's form (no ``..``, no absolute path).

Ollama's prompt template (a Go template, the ``...image.template`` layer) is not decoderkit's
to render: the GGUF file's own jinja ``tokenizer.chat_template`` is used, or the model has no
chat (``NO_GO_TEMPLATE`` says why).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import TEXT_BYTES, check_input_file

REGISTRY, LIBRARY, LATEST = "registry.ollama.ai", "library", "latest"
MODEL_LAYER = "application/vnd.ollama.image.model"
TEMPLATE_LAYER = "application/vnd.ollama.image.template"
# Ollama's names: [host/][namespace/]model[:tag], lower-case parts, no path tricks
NAME = re.compile(r"^(?:[a-z0-9][a-z0-9._-]*/){0,2}[a-z0-9][a-z0-9._-]*"
                  r"(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?$")
DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
NO_GO_TEMPLATE = ("Ollama's Go template is not one decoderkit renders; the GGUF file has no "
                  "tokenizer.chat_template (jinja) of its own")


def models_dir() -> Path:
    """Ollama's models directory: ``$OLLAMA_MODELS``, else ``~/.ollama/models``."""
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models")


def manifest_path(name: str) -> Path | None:
    """The manifest file of the Ollama model ``name`` (None: no name of Ollama's form, or no
    store here); it may not exist."""
    manifests = models_dir() / "manifests"
    if ".." in name or not NAME.match(name) or not manifests.is_dir():
        return None
    model, _, tag = name.partition(":")
    parts = model.split("/")
    parts = [REGISTRY, LIBRARY, *parts] if len(parts) == 1 else \
        [REGISTRY, *parts] if len(parts) == 2 else parts
    return manifests.joinpath(*parts, tag or LATEST)


def ollama_blob(name: str) -> Path | None:
    """The GGUF blob of the Ollama model ``name``, or None where ``name`` is none of the
    store's (a cheap look: the manifest is read, the blob not); a manifest that is there but
    damaged is refused naming it."""
    manifest = manifest_path(name)
    if manifest is None or not manifest.is_file():
        return None
    check_input_file(manifest, "Ollama's manifest", TEXT_BYTES)
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers")
        digests = [layer["digest"] for layer in layers if layer.get("mediaType") == MODEL_LAYER]
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError, KeyError):
        raise UsageError(f"{manifest}: not an Ollama manifest (a JSON object whose layers "
                         "name their mediaType and digest)") from None
    found = [DIGEST.match(d) if isinstance(d, str) else None for d in digests]
    if len(found) != 1 or found[0] is None:
        raise UsageError(f"{manifest}: {len(found)} model layers ({MODEL_LAYER}) with a sha256 "
                         f"digest, expected one: {digests!r:.200}")
    return models_dir() / "blobs" / f"sha256-{found[0].group(1)}"
