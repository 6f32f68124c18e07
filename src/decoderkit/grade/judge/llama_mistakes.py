"""The Llama family's named mistakes: its blocks put where the 2017 block was asked (seed
002 warns that RMSNorm or a gated activation changes the function), and Week 3's Llama items
(RoPE, RMSNorm, SwiGLU, grouped-query heads) made wrong. ``catalogue`` adds them to its list.
"""

from __future__ import annotations

from decoderkit.grade.judge.mistake import Mistake

_LN = "LN(x) = gamma (x - mean) / sqrt(var + eps) + beta, var = sum (x - mean)^2 / D"
_FFN = "FFN(x) = max(0, x W1 + b1) W2 + b2, W1 (D, F), W2 (F, D)"
_ROPE = ("x' = x cos(p w) + rotate_half(x) sin(p w), rotate_half(x) = (-x2, x1), "
         "w_i = theta^(-2i/d), halves x1, x2")
_RMS = "RMSNorm(x) = g x / sqrt(mean(x^2) + eps)"
_SWIGLU = "SwiGLU(x) = (silu(x W_gate^T) * x W_up^T) W_down^T"
_GQA = "query head i reads key/value head i // (h / h_kv): repeat_interleave on the head axis"
_W3 = "week 3 (Llama: Hugging Face's modeling_llama)"

SEED_MISTAKES = (  # seed 002's block with a Llama-family part in it, via blocks.Spec switches
    Mistake("ln_rms_for_layer_norm", "RMSNorm where LayerNorm is asked (no mean subtracted)",
            "The exercise's LayerNorm subtracts each row's mean before dividing by its "
            "standard deviation; RMSNorm (Llama's) divides x itself by its root mean square. "
            "The two agree only on rows whose mean is zero, so the block computes another "
            "function (the seed's warning about swapping the norm).", _LN,
            "002 Layer normalization", {"ln_var": "rms"}),
    Mistake("ffn_gelu_for_relu", "GELU in the feed-forward network where ReLU is asked",
            "The exercise's FFN is max(0, x W1 + b1) W2 + b2. GELU (GPT's activation) is a "
            "smooth ReLU, close to it for large |x| but not near zero, so every output of the "
            "block changes.", _FFN, "002 Three stages", {"relu": "gelu"}),
    Mistake("ffn_swish_for_relu", "swish/SiLU (SwiGLU's activation) in the feed-forward where "
            "ReLU is asked", "The exercise's FFN is max(0, x W1 + b1) W2 + b2. Llama's SwiGLU "
            "uses x sigmoid(x) with a second (gate) matrix the exercise does not have; putting "
            "the swish in ReLU's place changes the function (the seed's warning about changing "
            "the activation).", _FFN, "002 Three stages", {"relu": "swish"}),
)

WEEK3_MISTAKES = (  # their arithmetic: reference.llama
    Mistake("rope_interleaved", "RoPE rotates adjacent pairs (2i, 2i+1), not the two halves",
            "Both layouts are rotary embeddings, but a checkpoint is trained with one: Hugging "
            "Face's Llama pairs feature i with feature i + d/2 (rotate_half), the original "
            "paper and Meta's code adjacent features. Rotating the other pairs gives other "
            "queries and keys for the same weights.", _ROPE, _W3),
    Mistake("rope_rotation_reversed", "RoPE rotates the wrong way (rotate_half as (x2, -x1))",
            "rotate_half(x) is (-x2, x1): the pair (a, b) becomes (a cos - b sin, b cos + a "
            "sin). Writing (x2, -x1) rotates by -p w instead; the offset property still holds, "
            "but the scores are those of the mirrored positions.", _ROPE, _W3),
    Mistake("rope_theta_ignored", "RoPE uses the base 10000 whatever theta is given",
            "The frequency base is a model's setting (rope_theta: 10000 in Llama 2, 500000 in "
            "Llama 3, 1000000 in Qwen2). A hard-coded 10000 is right only for the first.",
            _ROPE, _W3),
    Mistake("rope_frequency", "RoPE's frequencies are theta^(-i/d), not theta^(-2i/d)",
            "Pair i turns by w_i = theta^(-2i/d) per position: the exponents run over the even "
            "numbers 0, 2, ..., d - 2. Dividing i itself by d makes every pair but the first "
            "turn too fast.", _ROPE, _W3),
    Mistake("rms_mean_subtracted", "RMSNorm subtracts the mean (it is LayerNorm without beta)",
            "RMSNorm divides x by its root mean square, sqrt(mean(x^2) + eps), with no mean "
            "subtracted first: that is the simplification over LayerNorm. Centring the row "
            "computes LayerNorm's arithmetic with RMSNorm's weights.", _RMS, _W3),
    Mistake("rms_eps_outside_root", "RMSNorm adds eps to the root mean square, outside the root",
            "eps goes inside the square root: x / sqrt(mean(x^2) + eps). Adding it after the "
            "root agrees on large rows but not on nearly zero ones, where eps decides.",
            _RMS, _W3),
    Mistake("swiglu_gate_up_swapped", "SwiGLU applies silu to the up projection, not the gate",
            "silu goes on the gate projection, which then multiplies the up projection: "
            "silu(x W_gate^T) * x W_up^T. Swapping the two matrices gives another function "
            "of the same weights (checkpoints name them gate_proj and up_proj).", _SWIGLU, _W3),
    Mistake("swiglu_gelu_for_silu", "SwiGLU gated with GELU (GeGLU), not silu",
            "SwiGLU's gate is silu(z) = z sigmoid(z); GELU in its place is GeGLU, another "
            "member of the family, close to silu for large |z| but not near zero.", _SWIGLU,
            _W3),
    Mistake("kv_heads_tiled", "k/v heads repeated with repeat/tile, not repeat_interleave",
            "With h_kv key/value heads for h query heads, the query heads come in groups of "
            "g = h / h_kv: heads 0..g-1 read kv head 0, the next g kv head 1, and so on. "
            "x.repeat(1, g, 1, 1) lays the copies end to end instead (query head i reads kv "
            "head i % h_kv), so each query head attends with another head's keys.", _GQA, _W3),
)
