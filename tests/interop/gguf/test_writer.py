"""What every GGUF export shares, here the end of generation: every id a model ends at (its
tokenizer's EOS and <|endoftext|>, generation_config.json's list) is in llama.cpp's
end-of-generation set, under the EOS, EOT and EOM keys where llama.cpp does not know the token
by its text; checked by llama.cpp itself (llama-cpp-python) stopping at the list's second id
where the export without the list runs past it. More ids than the keys hold are refused."""

from __future__ import annotations

import pytest
import torch
from interop import gguf_helpers as h

from decoderkit.base.errors import UsageError
from decoderkit.cli import main
from decoderkit.generation.lm.defaults import GenerationDefaults
from decoderkit.interop.gguf.export import export_gguf
from decoderkit.interop.gguf.writer import FILE
from decoderkit.interop.llama.hf_export import export_llama

# ids 300-303: three ends llama.cpp does not know by their text, and one it does (Qwen's)
STOP_A, STOP_B, STOP_C, IM_END = 300, 301, 302, 303
EOT = 299  # bpe_tokenizer's <|endoftext|>: its named EOS


@pytest.fixture(scope="module")
def tokenizer():
    tok = h.bpe_tokenizer()
    tok.hf.add_special_tokens(["<|stop_a|>", "<|stop_b|>", "<|stop_c|>", "<|im_end|>"])
    return tok


def ends(*ids: int) -> GenerationDefaults:
    """A directory's generation_config.json ending at ``ids``."""
    return GenerationDefaults("generation_config.json", eos_ids=ids)


def keys(fields: dict) -> tuple:
    """The EOS, EOT and EOM keys of a file's metadata (None: absent)."""
    return tuple(fields.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom"))


def test_each_end_id_gets_a_key_unless_llama_cpp_knows_its_text(tmp_path, tokenizer):
    lm = h.llama()
    for i, (generation, want) in enumerate((
            (ends(), (EOT, None, None)),  # <|endoftext|>: the EOS, and known by its text
            (ends(STOP_A, STOP_B), (EOT, STOP_A, STOP_B)),
            (ends(IM_END, STOP_B, EOT), (EOT, STOP_B, None)))):  # <|im_end|> needs no key
        out = export_gguf(lm, tokenizer, tmp_path / str(i), generation=generation)
        assert keys(h.read_back(out / FILE)[1]) == want


def test_more_ends_than_keys_are_refused_naming_them(tmp_path, tokenizer):
    with pytest.raises(UsageError, match=r"llama.cpp holds 3 end-of-generation ids by key .* "
                       r"also ends at '<\|stop_c\|>' \(id 302\), which llama.cpp would"):
        export_gguf(h.llama(), tokenizer, tmp_path / "a",
                    generation=ends(STOP_A, IM_END, STOP_B, STOP_C))
    with pytest.raises(UsageError, match="end-of-text id 320 is no token of the model's 320"):
        export_gguf(h.llama(), tokenizer, tmp_path / "a", generation=ends(320))
    assert not any(tmp_path.iterdir())


def test_llama_cpp_stops_at_the_second_id_of_the_directorys_list(tmp_path, tokenizer):
    lm, prompt = h.llama(seed=1), h.PROMPTS[3]
    first = h.greedy_with_margins(lm, [prompt], 4)[0][0]
    with torch.no_grad():  # tied: <|stop_b|>'s logit 1.5x that of our second greedy token
        lm.embed.lut.weight[STOP_B] = 1.5 * lm.embed.lut.weight[first[1]]
    want, margins = h.greedy_with_margins(lm, [prompt], 8)
    assert want[0][:2] == [first[0], STOP_B] and min(margins[0][:2]) > 2 * GGML_BOUND
    hf = export_llama(lm, tokenizer, tmp_path / "hf", generation=ends(STOP_A, STOP_B))
    assert main(["lm", "export", "--to", "gguf", "--checkpoint", str(hf), "--out",
                 str(tmp_path / "out")]) == 0
    llm = h.llama_cpp_model(tmp_path / "out" / FILE, h.CONTEXT)
    done = llm.create_completion(prompt, max_tokens=8, temperature=0.0)
    assert (done["choices"][0]["finish_reason"], done["usage"]["completion_tokens"]) == \
        ("stop", 1)
    assert h.llama_cpp_greedy(llm, prompt, 2) == want[0][:2]  # what it stopped at: STOP_B
    import llama_cpp

    eog = [llama_cpp.llama_vocab_is_eog(llm._model.vocab, i) for i in (EOT, STOP_A, STOP_B,
                                                                     STOP_C, IM_END, 5)]
    assert eog == [True, True, True, False, True, False]
    bare = h.llama_cpp_model(export_gguf(lm, tokenizer, tmp_path / "bare") / FILE, h.CONTEXT)
    past = bare.create_completion(prompt, max_tokens=8, temperature=0.0)
    assert past["usage"]["completion_tokens"] > 1  # without the list: on past <|stop_b|>


GGML_BOUND = 2e-4  # tests/interop/gguf/test_llama.py's: llama.cpp's float32 against ours
