"""interop.lm.directory: a Hugging Face LM directory's generation_config.json (its end ids,
an int or a list, and its sampling defaults), read with transformers' own files and used by
every command that generates."""

from __future__ import annotations

import json
import re

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.complete import generate
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.lm.directory import read_generation
from decoderkit.text.lm.tokenizer import LMTokenizer

transformers = pytest.importorskip("transformers")
TEXT = "the cat sat on the mat, and the dog sat on the log. " * 8


def directory(path, **generation):
    """A tiny random GPT-2 directory with a BPE tokenizer.json and, with ``generation``,
    transformers' own generation_config.json of those settings."""
    tokenizer = LMTokenizer.train_bpe([TEXT], 300)
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=tokenizer.vocab_size, n_positions=64,
                                     n_embd=16, n_layer=2, n_head=4)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0 if p.dim() > 1 else 1.0)  # varied, decided continuations
    model.save_pretrained(path)
    (path / "generation_config.json").unlink()
    if generation:
        transformers.GenerationConfig(**generation).save_pretrained(path)
    tokenizer.save(path / "tokenizer.json")
    return path


def test_transformers_files_read_as_their_settings(tmp_path):
    assert read_generation(tmp_path, 300).source == ""  # no file: no defaults
    directory(tmp_path, eos_token_id=[7, 9, 5000], do_sample=True, temperature=0.6,
              top_p=0.9, top_k=20, max_new_tokens=33)
    got = read_generation(tmp_path, 300)
    assert got.eos_ids == (7, 9)  # 5000: outside the vocabulary, never generated
    assert (got.greedy, got.temperature, got.top_p, got.top_k, got.max_new_tokens) == (
        False, 0.6, 0.9, 20, 33)
    transformers.GenerationConfig(eos_token_id=4, do_sample=False).save_pretrained(tmp_path)
    got = read_generation(tmp_path, 300)
    assert got.eos_ids == (4,) and got.greedy and got.temperature is None


@pytest.mark.parametrize("raw, needle", [
    ({"eos_token_id": "2"}, r"eos_token_id must be an id \(an integer >= 0\), a list of ids "
                            "or null, got '2'"),
    ({"eos_token_id": [1, True]}, "eos_token_id must be an id"),
    ({"temperature": 0}, "temperature must be a finite number > 0"),
    ({"top_p": 2.0}, "top_p must be"), ({"do_sample": "yes"}, "do_sample must be a bool"),
    ({"max_new_tokens": 0}, "max_new_tokens must be an integer"), ([], "not a JSON object"),
])
def test_a_wrong_value_is_refused_naming_the_file_and_the_key(tmp_path, raw, needle):
    (tmp_path / "generation_config.json").write_text(json.dumps(raw))
    with pytest.raises(UsageError, match=needle) as caught:
        read_generation(tmp_path, 300)
    assert str(caught.value).startswith(str(tmp_path / "generation_config.json"))


@pytest.mark.parametrize("eos", [-1, [3, -1], "2", 2.0, True, [[1]], {"id": 1}])
def test_one_rule_judges_eos_token_id_in_config_json_and_generation_config_json(tmp_path, eos):
    """The same function (``end_ids``) refuses a bad id in either file, with the same words:
    main accepted -1 in config.json (never read) and refused it in generation_config.json."""
    path = directory(tmp_path)
    config = path / "config.json"
    raw = json.loads(config.read_text())
    messages = []
    for file in (config, path / "generation_config.json"):
        file.write_text(json.dumps((raw if file == config else {}) | {"eos_token_id": eos}))
        with pytest.raises(UsageError, match=r"eos_token_id must be an id \(an integer >= 0\)"
                           ) as caught:
            load_checkpoint(path)
        assert str(caught.value).startswith(str(file))
        messages.append(str(caught.value).removeprefix(str(file)))
        file.write_text(json.dumps(raw if file == config else {}))
    assert messages[0] == messages[1]


def test_config_json_ends_where_there_is_no_generation_config(tmp_path):
    """As transformers' GenerationConfig.from_model_config: config.json's eos_token_id are
    the end ids without a generation_config.json, and yield to one."""
    path = directory(tmp_path)
    config = path / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | {"eos_token_id": [5, 7]}))
    got = read_generation(path, 300)
    assert (got.eos_ids, got.source) == ((5, 7), "config.json")
    assert load_checkpoint(path).end_ids >= {5, 7}
    transformers.GenerationConfig(eos_token_id=4).save_pretrained(path)
    assert read_generation(path, 300).eos_ids == (4,)


def test_generation_stops_at_every_id_of_the_list(tmp_path, capsys):
    from decoderkit.cli import main

    path = directory(tmp_path)
    ckpt = load_checkpoint(path)
    prompt = ckpt.tokenizer.encode("the cat")
    free = generate(ckpt.model, [prompt], max_new_tokens=12, greedy=True)[0]
    end = max(set(free), key=free.index)  # the token that comes first latest
    assert free.index(end) >= 2
    cut = free[:free.index(end) + 1]
    unused = next(i for i in range(300) if i not in free)
    transformers.GenerationConfig(eos_token_id=[unused, end]).save_pretrained(path)
    ckpt = load_checkpoint(path)
    assert ckpt.end_ids == {unused, end}
    assert generate(ckpt.model, [prompt], max_new_tokens=12, greedy=True,
                    eos_id=sorted(ckpt.end_ids)) == [cut]
    assert main(["lm", "sample", "--checkpoint", str(path), "--prompt", "the cat", "--greedy",
                 "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out == "the cat" + ckpt.tokenizer.decode(cut[:-1]) + "\n"


TEXTS = ["the cat", " the  mat\n\n\tdog ", "héllo wörld ✓ 日本", "<s>the</s> <|eot|>cat", "a"]


def special_tokenizer(path, post_processor: bool, **config):
    """A BPE tokenizer.json with <s>, </s> and <|eot|> added as special tokens (with a
    post-processor putting <s> first, like Llama 3's), and a tokenizer_config.json of
    ``config``."""
    from tokenizers import processors

    tokenizer = LMTokenizer.train_bpe([TEXT], 300)
    tokenizer.hf.add_special_tokens(["<s>", "</s>", "<|eot|>"])
    if post_processor:
        bos = tokenizer.hf.token_to_id("<s>")
        tokenizer.hf.post_processor = processors.TemplateProcessing(
            single="<s>:0 $A:0", pair="<s>:0 $A:0 <s>:1 $B:1", special_tokens=[("<s>", bos)])
    tokenizer.save(path / "tokenizer.json")
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast"} | config))
    return path


@pytest.mark.parametrize("post_processor, config", [
    (False, {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}),  # not read
    (False, {"bos_token": {"__type": "AddedToken", "content": "<s>", "special": True},
             "eos_token": "</s>"}),
    (True, {"bos_token": "<s>", "eos_token": "<|eot|>"}),  # tokenizer.json's rule: <s> first
    (True, {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False}),
    (False, {"eos_token": "</s>", "add_eos_token": True, "pad_token": "<|eot|>"}),
])
def test_prompts_and_special_tokens_are_transformers_own(tmp_path, post_processor, config):
    from decoderkit.interop.lm.directory import read_tokenizer

    special_tokenizer(tmp_path, post_processor, **config)
    ours = read_tokenizer(tmp_path, 400)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS:
        assert ours.encode_prompt(text) == theirs(text).input_ids, text
        assert ours.encode(text) == theirs(text, add_special_tokens=False).input_ids, text
    for role in ("bos", "eos", "unk", "pad"):
        assert ours.special_id(role) == getattr(theirs, f"{role}_token_id"), role


@pytest.mark.parametrize("config, needle", [
    ({"eos_token": "<|endoftext|>"}, "eos_token '<|endoftext|>' is not in the tokenizer's "
                                     "vocabulary"),
    ({"bos_token": 3}, "bos_token must be a token, {\"content\": token} or null, got 3"),
    ({"added_tokens_decoder": {"7": {"content": "</s>"}}}, "added_tokens_decoder '7'"),
    ({"add_bos_token": "yes"}, "add_bos_token must be a bool"),
])
def test_a_special_token_the_vocabulary_lacks_is_refused_naming_it(tmp_path, config, needle):
    from decoderkit.interop.lm.directory import read_tokenizer

    special_tokenizer(tmp_path, False, **config)
    with pytest.raises(UsageError, match=re.escape(needle)) as caught:
        read_tokenizer(tmp_path, 400)
    assert str(caught.value).startswith(str(tmp_path / "tokenizer_config.json"))
