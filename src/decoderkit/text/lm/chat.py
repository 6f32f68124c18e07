"""Chat: a conversation to the prompt's token ids with the model's own chat template, the ids
transformers' ``apply_chat_template(messages, add_generation_prompt=True, tokenize=True)``
gives.

A Hugging Face directory's template is ``chat_template.jinja`` (what transformers writes since
4.50, and reads before the config's), else ``tokenizer_config.json``'s ``chat_template``: a
string, or a list of named templates of which "default" is used. It is rendered in the bounded
sandbox (``text.lm.sandbox``) with transformers' variables: ``messages``, ``tools`` and
``documents`` (None), ``add_generation_prompt`` and the named special tokens (``bos_token``,
``eos_token``, ... from ``tokenizer_config.json``, else ``special_tokens_map.json``). The text is
tokenized without added special tokens (transformers' rule): a template that writes BOS gets
one, a template that does not gets none, never two.

A message is a role (system, user or assistant) and its text; a list of text parts is read as
their texts joined by newlines (vLLM's rule for text templates).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import check_input_file
from decoderkit.base.model_files import model_file
from decoderkit.base.text import read_json, read_text
from decoderkit.text.lm.sandbox import compile_template
from decoderkit.text.lm.template_process import TemplateProcess
from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer

ROLES = ("system", "user", "assistant")
TEMPLATE_FILE, TOKENIZER_CONFIG = "chat_template.jinja", "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                 "mask_token")  # transformers' named special tokens, the template's variables
TEMPLATE_BYTES = 1 << 20  # the largest template file read (the largest on the Hub: ~30 KB)
# transformers' tokenizer classes' own values for a named token their config leaves out
# (DialoGPT's template writes eos_token, which only GPT2Tokenizer's default gives)
CLASS_DEFAULTS = {
    "GPT2Tokenizer": dict.fromkeys(("bos_token", "eos_token", "unk_token"), END_OF_TEXT),
    "Qwen2Tokenizer": dict.fromkeys(("eos_token", "unk_token", "pad_token"), END_OF_TEXT),
    "LlamaTokenizer": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}}
MODEL_TOKENIZERS = {"gpt2": "GPT2Tokenizer"}  # model_type -> AutoTokenizer's class
GENERATION_BLOCK = re.compile(r"\{%-?\s*generation\s*-?%\}")  # transformers' own pattern


class ChatTemplate:
    """A model's chat template, compiled once (a syntax error: a ``UsageError`` at once) and
    rendered in a bounded process of its own (``text.lm.template_process``, started at
    the first render); ``encode(tokenizer, messages)`` gives the prompt's ids,
    ``render(messages)`` its text."""

    def __init__(self, source: str, special: dict[str, str] | None = None,
                 where: str = "the chat template"):
        self.source, self.where = source, where
        self.special = dict(special or {})
        compile_template(source, where)  # its syntax checked here
        self.process = TemplateProcess(source)

    def render(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        """The conversation as the template writes it (``TemplateFailed``: the template raised,
        failed or passed a bound; ``UsageError``: a malformed message)."""
        return self.process.render(self._variables(messages, add_generation_prompt))[0]

    def render_marked(self, messages: Sequence[dict], add_generation_prompt: bool = False
                      ) -> tuple[str, list[tuple[int, int]]]:
        """(``render``'s text, the (start, end) characters of each ``{% generation %}``
        block's output in it): the assistant's text where the template marks it."""
        text, spans = self.process.render(self._variables(messages, add_generation_prompt),
                                          spans=True)
        return text, [tuple(span) for span in spans]

    def _variables(self, messages: Sequence[dict], add_generation_prompt: bool) -> dict:
        """transformers' variables for the template (the module docstring)."""
        chat = [_message(i, m) for i, m in enumerate(check_messages(messages))]
        return {"messages": chat, "tools": None, "documents": None,
                "add_generation_prompt": add_generation_prompt, **self.special}

    @property
    def marks_generation(self) -> bool:
        """True if the template has ``{% generation %}`` blocks (transformers' test)."""
        return GENERATION_BLOCK.search(self.source) is not None

    def encode(self, tokenizer: LMTokenizer, messages: Sequence[dict],
               add_generation_prompt: bool = True) -> list[int]:
        """The rendered conversation's ids, no special token added (the template's own only)."""
        return tokenizer.encode(self.render(messages, add_generation_prompt))

    def end_ids(self, tokenizer: LMTokenizer) -> frozenset[int]:
        """The ids a reply ends at besides the model's end-of-text: the template's
        ``eos_token`` (a turn's end: ``<|im_end|>``, ``<|eot_id|>``), where the vocabulary has
        it."""
        eos = self.special.get("eos_token")
        found = None if eos is None else tokenizer.hf.token_to_id(eos)
        return frozenset() if found is None else frozenset({found})

    @classmethod
    def find(cls, directory: str | Path) -> ChatTemplate | None:
        """The template of a model directory; None when it has none (or is a file)."""
        directory = Path(directory)
        if not directory.is_dir():
            return None
        config_path = model_file(directory, TOKENIZER_CONFIG)  # no link out of the directory
        config = _object(config_path) if os.path.lexists(config_path) else {}
        file = model_file(directory, TEMPLATE_FILE)
        if os.path.lexists(file):
            check_input_file(file, "the chat template", TEMPLATE_BYTES)
            return cls(read_text(file, "the chat template"), special_tokens(directory, config),
                       str(file))
        source = config.get("chat_template")
        if source is None:
            return None
        return cls(_default_template(source, config_path), special_tokens(directory, config),
                   f"{config_path}: chat_template")


def no_template(directory: str | Path) -> str:
    """Why a model has no chat template, naming where one would be."""
    return (f"this model has no chat template: {directory} has no {TEMPLATE_FILE} and no "
            f"chat_template in {TOKENIZER_CONFIG}")


def special_stops(tokenizer: LMTokenizer, stops: Sequence[str]
                  ) -> tuple[tuple[str, ...], frozenset[int]]:
    """(stop texts, stop ids): a stop that is one special token's text stops at that token's
    id, as a reply's text (decoded without special tokens) never shows it."""
    special = {t.content: i for i, t in tokenizer.hf.get_added_tokens_decoder().items()
               if t.special}
    return (tuple(s for s in stops if s not in special),
            frozenset(special[s] for s in stops if s in special))


def check_messages(messages: object) -> list[dict]:
    """``messages`` as a non-empty list of {role, content} objects, each role one of
    ``ROLES`` and each content a string or a list of text parts; else a ``UsageError`` naming
    the message and field (``messages[1].role``)."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise UsageError("messages: give at least one message ({role, content})")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise UsageError(f"messages[{i}]: must be an object with role and content")
        if m.get("role") not in ROLES:
            got = "no role" if "role" not in m else f"{m['role']!r}"
            raise UsageError(f"messages[{i}].role: must be one of {', '.join(ROLES)}, got {got}")
        _content(i, m.get("content"))
    return list(messages)


def _content(i: int, content: object) -> str:
    """A message's text: a string, or a list of ``{"type": "text", "text": ...}`` parts joined
    by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content):
        return "\n".join(p["text"] for p in content)
    raise UsageError(f"messages[{i}].content: must be a string or a non-empty list of text "
                     f"parts ({{\"type\": \"text\", \"text\": ...}}), got {type(content).__name__}")


def _message(i: int, m: dict) -> dict:
    """The message the template sees: plain types, its content a string, no None values (as
    transformers drops them)."""
    out = {k: v for k, v in m.items() if v is not None and isinstance(v, (str, int, float))}
    out["content"] = _content(i, m["content"])
    return out


def special_tokens(directory: Path, config: dict) -> dict[str, str]:
    """The named special tokens' texts (``bos_token``...) of ``tokenizer_config.json``'s
    ``config`` (else of ``special_tokens_map.json``), each a string or an added token's
    ``content``; a name left out takes its tokenizer class's default (``CLASS_DEFAULTS``), a
    null stays unset, as transformers loads them."""
    named = config
    legacy = model_file(directory, SPECIAL_TOKENS_MAP)
    if not any(name in config for name in SPECIAL_NAMES) and os.path.lexists(legacy):
        named = _object(legacy)
    defaults = CLASS_DEFAULTS.get(_tokenizer_class(directory, config), {})
    found = {name: _token_text(named[name] if name in named else defaults.get(name))
             for name in SPECIAL_NAMES}
    return {name: text for name, text in found.items() if text is not None}


def _tokenizer_class(directory: Path, config: dict) -> str | None:
    """The transformers tokenizer class the directory names (its ``Fast`` twin alike), or,
    named nowhere, the one AutoTokenizer picks for config.json's ``model_type``."""
    named = config.get("tokenizer_class")
    config = model_file(directory, "config.json")
    if named is None and os.path.lexists(config):
        named = MODEL_TOKENIZERS.get(_object(config).get("model_type"))
    return named.removesuffix("Fast") if isinstance(named, str) else None


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _object(path: Path) -> dict:
    value = read_json(path, path.name)
    if not isinstance(value, dict):
        raise UsageError(f"{path}: must be a JSON object, got {type(value).__name__}")
    return value


def _default_template(source: object, path: Path) -> str:
    """``chat_template``'s text: a string, or the "default" of a list of {name, template}."""
    if isinstance(source, list):
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        if "default" not in named:
            raise UsageError(f"{path}: chat_template lists templates {sorted(map(str, named))} "
                             f"but none named 'default'")
        source = named["default"]
    if not isinstance(source, str) or not source:
        raise UsageError(f"{path}: chat_template must be a non-empty string or a list of "
                         f"named templates, got {type(source).__name__}")
    return source
