"""The cells of the Week 3 Llama notebook (see build.py): the blocks that replaced GPT-2's
(rotary positions, RMSNorm, the SwiGLU feed-forward, grouped-query heads) and LoRA's pieces
(the adapted linear, the merge, the initialisation), each followed by a grade(...) cell.
Nothing is trained: it runs in seconds."""

from course import BLANK, IMPORTS

LLAMA_W3 = [
    ("md", """
# Week 3: the Llama family's blocks

The small decoder models people download today (Llama 3.2, Qwen2.5 / Qwen3, SmolLM2,
Mistral) keep GPT-2's decoder-only stack and change four of its parts: **RoPE** (positions
as rotations of each head's queries and keys, no position table), **RMSNorm** (no mean
subtracted, no beta), a **SwiGLU** feed-forward (a gate, an up and a down projection) and
**grouped-query attention** (fewer key/value heads than query heads, each read by a group of
query heads). First decoderkit's `llama` preset, untrained, to see the parts; then you write
the four pieces, in Hugging Face's conventions, and grade them. `decoderkit lm train --preset
llama` trains one (see docs/language-models.md)."""),
    IMPORTS,
    ("code", """
if __name__ == "__main__":  # Jupyter runs this; `decoderkit grade` on the whole notebook does not
    from dataclasses import replace

    from decoderkit.nn.lm.model import DecoderOnlyLM
    from decoderkit.nn.lm.presets import lm_preset

    config = replace(lm_preset("llama"), vocab_size=64, n_layers=1)
    model = DecoderOnlyLM(config)
    print(model)  # RMSNorm, grouped q/k/v projections, the gated FFN; RoPE has no weights
    print(sum(p.numel() for p in model.parameters()), "parameters")
    print("query heads", config.n_heads, "key/value heads", config.n_kv_heads,
          "rope theta", config.rope_theta)"""),
    ("md", """
## Rotary positions (RoPE)

Write `apply_rope(x, positions, theta=10000.0)`: `x` (B, h, T, d) queries or keys,
`positions` (T,) their positions. Split each head's d features into halves x1, x2 and pair
feature i with feature i + d/2 (Hugging Face's **rotate-half** layout, not adjacent pairs);
pair i turns by the angle p w_i, w_i = theta^(-2i/d):
`x cos + rotate_half(x) sin` with `rotate_half(x) = (-x2, x1)` and the angles repeated over
both halves. Return the same shape and dtype. The grader also checks RoPE's point on your own
function: a query's score with a key depends only on their offset p - p'."""),
    ("exercise", """
def apply_rope(x, positions, theta=10000.0):
    d = x.size(-1)
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv_freq  # (T, d/2)
    emb = torch.cat((angles, angles), dim=-1)  # (T, d)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return (x * emb.cos() + rotated * emb.sin()).to(x.dtype)
""", f"""
def apply_rope(x, positions, theta=10000.0):
{BLANK}
"""),
    ("grade", "grade(apply_rope)"),
    ("md", """
## RMSNorm

Write `rms_norm(x, weight, eps=1e-6)`: `weight * x / sqrt(mean(x^2) + eps)` over the last
axis. Unlike LayerNorm, no mean is subtracted and there is no beta."""),
    ("exercise", """
def rms_norm(x, weight, eps=1e-6):
    return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
""", f"""
def rms_norm(x, weight, eps=1e-6):
{BLANK}
"""),
    ("grade", "grade(rms_norm)"),
    ("md", """
## The SwiGLU feed-forward

Write `swiglu(x, w_gate, w_up, w_down)`: `(silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T`,
the weights in `nn.Linear`'s orientation (w_gate and w_up (F, D), w_down (D, F)), no biases.
silu(z) = z sigmoid(z) goes on the gate, which multiplies the up projection."""),
    ("exercise", """
def swiglu(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
""", f"""
def swiglu(x, w_gate, w_up, w_down):
{BLANK}
"""),
    ("grade", "grade(swiglu)"),
    ("md", """
## Grouped-query attention's heads

With h query heads and h_kv key/value heads (h_kv divides h), query head i reads key/value
head i // (h / h_kv): heads come in consecutive groups. Write `repeat_kv(x, n_rep)`: `x`
(B, h_kv, T, d) keys or values, returned as (B, h_kv * n_rep, T, d) with each head repeated
`n_rep` times in place (not the whole set tiled `n_rep` times)."""),
    ("exercise", """
def repeat_kv(x, n_rep):
    return x.repeat_interleave(n_rep, dim=1)
""", f"""
def repeat_kv(x, n_rep):
{BLANK}
"""),
    ("grade", "grade(repeat_kv)"),
    ("md", """
## Tuning them cheaply: LoRA

To teach such a model a task, LoRA (Hu et al. 2021; PEFT's adapter layer) freezes every
weight and adds to a linear y = x W^T + b a low-rank update: y + (alpha / r) (x A^T) B^T,
A (r, in) and B (out, r) the only numbers trained. Write
`lora_linear(x, weight, bias, lora_A, lora_B, alpha)` (r is `lora_A.shape[0]`; the scale is
alpha / r, so that alpha need not change with the rank). The base is frozen: no gradient may
reach `weight` or `bias` (the grader passes them wanting one, as a model's Parameters; PEFT
sets their `requires_grad` False, a function detaches them), only `lora_A` and `lora_B`."""),
    ("exercise", """
def lora_linear(x, weight, bias, lora_A, lora_B, alpha):
    scale = alpha / lora_A.shape[0]
    return x @ weight.detach().T + bias.detach() + scale * (x @ lora_A.T) @ lora_B.T
""", f"""
def lora_linear(x, weight, bias, lora_A, lora_B, alpha):
{BLANK}
"""),
    ("grade", "grade(lora_linear)"),
    ("md", """
For inference the update is merged: W' = W + (alpha / r) B A, and the model costs what the
base did. Write `lora_merge(weight, lora_A, lora_B, alpha)` returning W' as a **new** tensor:
a merge that adds into `weight` in place changes the base, and merging twice adds the update
twice."""),
    ("exercise", """
def lora_merge(weight, lora_A, lora_B, alpha):
    return weight + alpha / lora_A.shape[0] * lora_B @ lora_A
""", f"""
def lora_merge(weight, lora_A, lora_B, alpha):
{BLANK}
"""),
    ("grade", "grade(lora_merge)"),
    ("md", """
Last, PEFT's initialisation: `lora_init(in_features, out_features, r)` returns (A, B), A
(r, in) Kaiming-uniform with a = sqrt(5) (what `nn.Linear` does to its weight: |A| <= 1 /
sqrt(in)) and B (out, r) zeros, so that B A = 0 and step 0 computes exactly the pretrained
model. `decoderkit lm tune` trains such adapters (docs/language-models.md)."""),
    ("exercise", """
def lora_init(in_features, out_features, r):
    A = torch.empty(r, in_features, dtype=torch.float64)
    nn.init.kaiming_uniform_(A, a=math.sqrt(5))
    return A, torch.zeros(out_features, r, dtype=torch.float64)
""", f"""
def lora_init(in_features, out_features, r):
{BLANK}
"""),
    ("grade", "grade(lora_init)"),
]

NOTEBOOKS = {"week3_llama": LLAMA_W3}
