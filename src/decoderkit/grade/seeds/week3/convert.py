"""Week 3's ``convert_gpt2_state_dict``: Hugging Face GPT-2 weights into nanoGPT's names,
judged tensor by tensor on a random one-block state dict as Hugging Face writes it.
"""

from __future__ import annotations

import torch

from decoderkit.grade.judge.items import Inputs, Item, generator, randn, results_for
from decoderkit.grade.judge.judging import Case, Outcome, Tolerance, judge
from decoderkit.grade.run.sandbox import Call
from decoderkit.grade.seeds.week3.config import SEED, D, F, L, V

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
BUFFERS = (".attn.bias", ".attn.masked_bias")  # HF's attention buffers, not weights


def hf_gpt2_state(seed: int = 62) -> dict[str, torch.Tensor]:
    """A random one-block GPT2LMHeadModel state dict as Hugging Face writes it: Conv1D
    weights (in, out), the ``transformer.`` prefix, the attention buffers of older files."""
    g, d = generator(seed), D
    shapes = {"transformer.wte.weight": (V, d), "transformer.wpe.weight": (L, d)}
    for name, shape in (("ln_1.weight", (d,)), ("ln_1.bias", (d,)), ("attn.bias", (1, 1, L, L)),
                        ("attn.masked_bias", ()), ("attn.c_attn.weight", (d, 3 * d)),
                        ("attn.c_attn.bias", (3 * d,)), ("attn.c_proj.weight", (d, d)),
                        ("attn.c_proj.bias", (d,)), ("ln_2.weight", (d,)), ("ln_2.bias", (d,)),
                        ("mlp.c_fc.weight", (d, F)), ("mlp.c_fc.bias", (F,)),
                        ("mlp.c_proj.weight", (F, d)), ("mlp.c_proj.bias", (d,))):
        shapes[f"transformer.h.0.{name}"] = shape
    shapes |= {"transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,),
               "lm_head.weight": (V, d)}
    return {k: randn(g, *shape).float() if shape else torch.tensor(-1e4)
            for k, shape in shapes.items()}


def prepare_convert(inputs: Inputs):
    sd = hf_gpt2_state()
    spec = {"tdict": {k: inputs.ref(f"w3_sd_{k}", v)["t"] for k, v in sd.items()}}
    calls = [Call(id="w3_convert", name="convert_gpt2_state_dict", kind="call", args=(spec,))]
    expected = {k: v.T if k.endswith(CONV1D) else v for k, v in sd.items()
                if not k.endswith(BUFFERS)}

    def judge_results(results):
        (r,) = results_for(results, calls)
        value = r.get("value")
        name = "convert_gpt2_state_dict"
        if "error" in r or not isinstance(value, dict) or "__dict__" not in value:
            return Outcome(name, SEED, "FAIL", r.get("error") or "returned "
                           f"{value.get('__type__') if isinstance(value, dict) else value!r:.40}"
                           ", expected a dict of tensors")
        got = value["__dict__"]
        wrong = sorted(set(expected) ^ set(got))
        if wrong:
            return Outcome(name, SEED, "FAIL", f"keys differ from nanoGPT's: {wrong[:3]} "
                           f"({len(wrong)} in all; the attention buffers {BUFFERS} are dropped)")
        cases = [Case(key, {"value": got[key]}, want.double(), lambda m, k=key, w=want: [
            w, sd[k].double()]) for key, want in expected.items()]
        return judge(name, SEED, cases, ("conv1d_not_transposed",), Tolerance(1e-12, 0.0))

    return calls, judge_results


ITEMS = (
    Item("convert_gpt2_state_dict", SEED, "convert_gpt2_state_dict(sd_hf) -> dict",
         "a Hugging Face GPT2LMHeadModel state dict -> nanoGPT's GPT state dict: the same "
         "names, the attention buffers (attn.bias, attn.masked_bias) dropped, the four Conv1D "
         "weights (c_attn, attn.c_proj, c_fc, mlp.c_proj) transposed to nn.Linear's (out, in)",
         "exact, tensor by tensor", ("conv1d_not_transposed",), prepare_convert),
)
