"""Hugging Face GPT-2 directories with a chat template, written by transformers itself (import
as ``from text.lm.chat_dirs import ...``): a tiny random GPT2LMHeadModel and a byte-level
BPE with the chat shapes' special tokens, saved by ``save_pretrained`` (the template in
chat_template.jinja, or in tokenizer_config.json with ``in_config``); and Ctrl-C injected into
a reply (``interrupt_step``, ``interrupt_at``: a real SIGINT at a chosen point)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tokenizers import processors

from decoderkit.generation.lm.rows import Rows
from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer

TEXT = ("The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
        "To be, or not to be, that is the question. All that glitters is not gold. "
        "[INST] user assistant system [/INST] You are a helpful assistant. ") * 20

SPECIAL = [END_OF_TEXT, "<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
           "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<s>", "</s>", "<|user|>",
           "<|system|>", "<|assistant|>"]

CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by "
          "Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")  # SmolLM2's
QWEN = ("{%- if messages[0]['role'] == 'system' %}\n    {{- '<|im_start|>system\\n' + "
        "messages[0]['content'] + '<|im_end|>\\n' }}\n{%- else %}\n    {{- '<|im_start|>system"
        "\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
        "\n{%- endif %}\n{%- for message in messages %}\n    {%- if (message.role == \"user\") or "
        "(message.role == \"system\" and not loop.first) or (message.role == \"assistant\") %}\n"
        "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + "
        "'\\n' }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- "
        "'<|im_start|>assistant\\n' }}\n{%- endif %}\n")  # Qwen2.5's, without its tools branch
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
          "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = "
          "bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt "
          "%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
MISTRAL = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
           "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
           "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
           "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
           "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only "
           "user and assistant roles are supported!') }}{% endif %}{% endfor %}")
ZEPHYR = ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' "
          "+ message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ "
          "'<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == "
          "'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}"
          "\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n"
          "{% endfor %}")

# a template whose each value is allowed, 1,000 of them kept: 1 GB (main rendered '1000',
# holding it; its process's memory bound refuses it)
HUNGRY = ("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}"
        "{% set ns.l = ns.l + ['x' * 1000000] %}{% endfor %}{{ ns.l|length }}")

# shape -> (template, bos_token, eos_token); Llama 3's tokenizer also adds BOS itself
SHAPES = {"chatml": (CHATML, None, "<|im_end|>"), "qwen": (QWEN, None, "<|im_end|>"),
          "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
          "mistral": (MISTRAL, "<s>", "</s>"), "zephyr": (ZEPHYR, None, "</s>")}


def chat_tokenizer() -> LMTokenizer:
    """A 300-token byte-level BPE and the shapes' special tokens (ids 300 onwards)."""
    tokenizer = LMTokenizer.train_bpe([TEXT], 300)
    tokenizer.hf.add_special_tokens(SPECIAL)
    return tokenizer


def chat_directory(path: Path, shape: str, in_config: bool = False, seed: int = 0,
                   template: str | None = None, zero: bool = False, padded: bool = False,
                   llama: bool = False) -> Path:
    """A GPT-2 directory of ``shape`` (or ``template`` with its tokens) saved by transformers;
    ``zero``: every weight 0, so every logit is equal and greedy replies are token 0 forever;
    ``padded``: 64 rows past the tokenizer's, rigged to win every argmax (``rig_padding``);
    ``llama``: a Llama (grouped-query, RoPE, SwiGLU) of 512 positions instead."""
    import torch
    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                              PreTrainedTokenizerFast)

    source, bos, eos = SHAPES[shape]
    hf = chat_tokenizer().hf
    if bos is not None:  # as Llama's: the tokenizer adds BOS unless told not to
        hf.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, hf.token_to_id(bos))])
    fast = PreTrainedTokenizerFast(tokenizer_object=hf, bos_token=bos, eos_token=eos)
    fast.chat_template = template or source
    torch.manual_seed(seed)
    ids = {k: fast.convert_tokens_to_ids(t) for k, t in (("bos_token_id", bos or eos),
                                                          ("eos_token_id", eos))}
    if llama:
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **ids))
    else:
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(fast) + 64 * padded,
                                           n_positions=128, n_embd=32, n_layer=2, n_head=4,
                                           **ids))
    if padded:
        from conftest import rig_padding

        rig_padding(model.lm_head.weight, len(fast))  # tied: the padded ids' embeddings
    if zero:
        for p in model.parameters():
            p.data.zero_()
    model.save_pretrained(path)
    fast.save_pretrained(path)
    if in_config:
        jinja = path / "chat_template.jinja"
        config_file = path / "tokenizer_config.json"
        settings = json.loads(config_file.read_text()) | {"chat_template": jinja.read_text()}
        config_file.write_text(json.dumps(settings))
        jinja.unlink()
    return path


def interrupt_step(monkeypatch, at: int = 3) -> list[int]:
    """Ctrl-C as a user presses it: a SIGINT raised at ``Rows.step``'s ``at``-th call, before
    it runs (the calls, counted, are returned)."""
    return interrupt_at(monkeypatch, Rows, "step", at)


class _Finalized:
    """An object whose finalizer receives the SIGINT: Python's default handler raises
    KeyboardInterrupt there, and the interpreter drops it ("Exception ignored in")."""

    def __del__(self):
        signal.raise_signal(signal.SIGINT)


def interrupt_at(monkeypatch, owner, name: str, at: int = 1,
                 in_finalizer: bool = False) -> list[int]:
    """A real SIGINT (``signal.raise_signal``) at the ``at``-th call of ``owner.name``, before
    it runs; ``in_finalizer``: while a finalizer runs there (as the garbage collector may run
    one at any point of a reply). The calls, counted, are returned."""
    original, calls = getattr(owner, name), []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == at:
            if in_finalizer:
                _Finalized()  # dropped at once: its __del__ runs here
            else:
                signal.raise_signal(signal.SIGINT)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, interrupted)
    return calls
