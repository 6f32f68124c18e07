"""The named mistakes ``decoderkit grade`` can diagnose, each explained for learners.

A ``Mistake`` is data: its name, a one-paragraph explanation, the spec's formula and the seed
section it comes from, and (for the decoder-block family) the ``blocks.Spec`` switches that
turn the reference into the mistake. Items without a block (positions, label smoothing, the
warm-up rate, decode loops) build their variant from the mistake's name in ``pieces``.
"""

from __future__ import annotations

from decoderkit.grade.judge.llama_mistakes import SEED_MISTAKES, WEEK3_MISTAKES
from decoderkit.grade.judge.lora_mistakes import LORA_MISTAKES
from decoderkit.grade.judge.mistake import Mistake, in_each_sublayer

DECODER_SUBLAYERS = (("self_attn", "self-attention"), ("cross_attn", "cross-attention"),
                     ("ffn", "feed-forward"))  # a decoder block's stages, in order
GPT_SUBLAYERS = (("attn", "attention"), ("mlp", "MLP"))  # a GPT block's

_LN = "LN(x) = gamma (x - mean) / sqrt(var + eps) + beta, var = sum (x - mean)^2 / D"
_AT_LN = "a_2 (x - mean) / (std + eps) + b_2, std = x.std(-1) (divides by D - 1), eps 1e-6"
_ATT = "softmax(Q K^T / sqrt(d_k) + M) V, M = -inf where a key is blocked"
_FFN = "FFN(x) = max(0, x W1 + b1) W2 + b2, W1 (D, F), W2 (F, D)"
_PE = "PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i), w_i = 10000^(-2i/d)"

MISTAKES = (
    Mistake("ln_sample_variance", "LayerNorm divides the variance by D-1 (sample variance)",
            "The spec normalises with the population variance: the mean of the squared "
            "deviations, divided by D. torch.var and torch.std divide by D-1 unless told "
            "otherwise (unbiased=False / correction=0), which makes every normalised value "
            "too small by sqrt((D-1)/D).", _LN, "002 Layer normalization; 000 §5",
            {"ln_var": "sample"}),
    Mistake("ln_eps_on_std", "LayerNorm adds eps to the standard deviation, outside the root",
            "The spec puts epsilon inside the square root: sqrt(var + eps). Adding it to the "
            "standard deviation instead, std + eps, agrees for rows with a large spread but "
            "not for nearly constant rows, where eps decides the result.", _LN,
            "002 Layer normalization; 000 §5", {"ln_eps": "std"}),
    Mistake("ln_eps_after_division", "LayerNorm adds eps after dividing by the std",
            "The epsilon ended up outside the division: (x - mean) / sqrt(var) + eps. It no "
            "longer protects the division, so a constant row divides by zero, and every "
            "output is shifted by eps.", _LN, "002 Layer normalization", {"ln_eps": "after"}),
    Mistake("at_ln_population", "Annotated LayerNorm with the population std (divides by D)",
            "The Annotated Transformer's LayerNorm uses x.std(-1), which divides by D-1. "
            "Replacing it by the population std (or by nn.LayerNorm's arithmetic) changes every "
            "output by a factor sqrt(D/(D-1)).", _AT_LN, "001 Layer Normalization",
            {"ln_var": "population"}),
    Mistake("at_ln_eps_in_root", "Annotated LayerNorm puts eps inside the square root",
            "The Annotated LayerNorm adds eps to the std: (std + eps). Writing sqrt(var + eps) "
            "is nn.LayerNorm's formula, not this class's; they differ on rows with small "
            "spread.", _AT_LN, "001 Layer Normalization", {"ln_eps": "sqrt"}),
    Mistake("no_scale", "attention scores are not divided by sqrt(d_k)",
            "Without the 1/sqrt(d_k) factor the dot products grow with the width, the softmax "
            "saturates and the weights become nearly one-hot.", _ATT,
            "000 §2; 001 attention; 002 Three stages", {"scale": "none"}),
    Mistake("scale_no_root", "attention scores are divided by d_k instead of sqrt(d_k)",
            "The scores must be divided by the square root of the key width. Dividing by the "
            "width itself flattens the softmax towards uniform weights.", _ATT,
            "000 §2; 001 attention; 002 Three stages", {"scale": "dk"}),
    Mistake("scale_d_model", "multi-head scores are divided by sqrt(d_model), not sqrt(d_k)",
            "Each head's queries and keys have width d_k = d_model / h; the scale is "
            "1/sqrt(d_k). Using the full model width makes every head's softmax too flat.",
            _ATT, "001 Multi-Head Attention; 004 slide 40", {"scale": "sqrt_dmodel"}),
    Mistake("causal_no_diagonal", "the causal mask also hides the diagonal (j >= i blocked)",
            "Position i may attend to itself and to earlier positions: only j > i is blocked "
            "(triu with diagonal=1). Blocking the diagonal too leaves the first position with "
            "no key at all, whose softmax is undefined (NaN).",
            "M_ij = 0 for j <= i, -inf for j > i", "000 §2; 004 slide 47", {"causal":
                                                                          "no_diagonal"}),
    Mistake("mask_flipped", "the mask is read with the opposite polarity",
            "Each API has its own mask convention: in the Annotated Transformer and decoderkit "
            "True/1 means may attend; nn.MultiheadAttention's bool attn_mask means blocked. "
            "Reading a mask the other way round hides exactly the keys that should be visible.",
            "AT: masked_fill(mask == 0, -1e9); MHA: True = blocked",
            "001 Mask polarity; 004 slide 10", {"causal": "flipped"}),
    Mistake("mask_after_softmax", "the mask zeroes weights after the softmax",
            "Blocked keys must get -inf before the softmax so that it renormalises over the "
            "visible keys. Zeroing weights afterwards leaves rows that no longer sum to 1 and "
            "scales every context vector down (the seed 004 trap).", _ATT,
            "004 slides 15-16; 000 §2", {"mask": "after"}),
    Mistake("softmax_wrong_axis", "the softmax runs over the queries (dim=-2), not the keys",
            "Each query row is a distribution over keys: softmax over the last axis. Over the "
            "other axis the columns sum to 1 instead, and a query's weights depend on the "
            "other queries.", _ATT, "000 §2; 001 attention", {"softmax_dim": -2}),
    Mistake("heads_reshape_only", "heads are split with a reshape, without the transpose",
            "(B, T, h d_k) must become (B, T, h, d_k) and then (B, h, T, d_k) with a transpose. "
            "Reshaping straight to (B, h, T, d_k) mixes positions and heads.",
            "view(B, -1, h, d_k).transpose(1, 2)", "001 Multi-Head Attention; 002 Split "
            "attention into heads", {"heads": "view"}),
    *in_each_sublayer(Mistake(
        "post_norm_for_pre", "post-norm, LN(x + F(x)), where pre-norm is specified",
        "This item normalises each stage's input: x + F(LN(x)). Normalising after the "
        "residual sum is a different function.", "x + F(LN(x))",
        "002 Keep normalization in the specified place; 001 SublayerConnection",
        {"norm": "post", "only": None}), DECODER_SUBLAYERS),
    *in_each_sublayer(Mistake(
        "pre_norm_for_post", "pre-norm, x + F(LN(x)), where post-norm is specified",
        "The lesson's block is post-norm: x1 = LN(x + SelfAttn(x)), and likewise for the "
        "other two sublayers. Normalising the input instead leaves the output "
        "unnormalised.", "x1 = LN(x + MaskedSelfAttn(x))", "004 slide 25; 000 §5",
        {"norm": "pre", "only": None}), DECODER_SUBLAYERS),
    Mistake("residual_on_normed", "the residual is added to the normalised input",
            "Each residual adds the sublayer's update to the stage's unnormalised input X, "
            "not to H = LN(X); otherwise the original signal never passes through.",
            "X1 = X + Attn(H1), H1 = LN(X)", "002 Three stages", {"norm": "pre_on_normed"}),
    Mistake("cross_causal", "cross-attention is causally masked",
            "The causal mask belongs to decoder self-attention only. Every decoder position may "
            "read every encoder position.", "weights = softmax(H2 enc_out^T / sqrt(D)) over all S",
            "002 Three stages; 004 slide 50", {"cross_causal": True}),
    Mistake("enc_normalised", "enc_out is normalised before cross-attention",
            "Keys and values of cross-attention are enc_out as given; only the decoder-side "
            "stage input is normalised.", "X2 = X1 + softmax(H2 E^T / sqrt(D)) E",
            "002 Three stages", {"enc_norm": True}),
    Mistake("extra_final_norm", "an extra LayerNorm on the block's output",
            "The block ends with its last residual stage: X2 + FF in seed 002's pre-norm "
            "exercise, LN3(x2 + FFN(x2)) in seed 004's post-norm block. Normalising once more "
            "rescales every row again and changes what the next block sees.",
            "out = X2 + FF (002); out = LN(x2 + FFN(x2)) (004)",
            "002 Three stages; 004 slide 25", {"final_norm": True}),
    Mistake("relu_missing", "the feed-forward network has no ReLU",
            "Without the non-linearity the two linear layers collapse into one linear map.",
            _FFN, "000 §3; 002 Three stages", {"relu": "none"}),
    Mistake("relu_after_output", "ReLU is applied after the second linear layer",
            "The ReLU sits between the two layers, on x W1 + b1; after W2 it clips the update "
            "itself to be non-negative.", _FFN, "000 §3; 002 Three stages", {"relu": "output"}),
    Mistake("b1_omitted", "the first feed-forward bias b1 is left out", "Both linear layers "
            "carry a bias; leaving b1 out shifts which units the ReLU lets through.", _FFN,
            "000 §3; 002 Three stages", {"ffn_bias": "no_b1"}),
    Mistake("b2_omitted", "the second feed-forward bias b2 is left out", "Both linear layers "
            "carry a bias; leaving b2 out shifts every output row by -b2.", _FFN,
            "000 §3; 002 Three stages", {"ffn_bias": "no_b2"}),
    Mistake("w1_transposed", "W1 is used transposed (x W1^T)",
            "W1 is given as (D, F): the product is H3 @ W1. Transposing it only runs when "
            "D = F, and then computes a different function.", _FFN, "002 Inputs and output",
            {"w1_transposed": True}),
    Mistake("pe_swapped", "sin and cos are swapped", "Even channels get the sine and odd "
            "channels the cosine; at position 0 the even channels are 0 and the odd ones 1.",
            _PE, "000 §4; 001 Positional encoding"),
    Mistake("pe_not_interleaved", "sines and cosines are concatenated, not interleaved",
            "The encoding alternates across channels: sin in 0, 2, 4, ..., cos in 1, 3, 5, ...; "
            "putting all sines first and all cosines after is a different table.", _PE,
            "000 §4; 001 Positional encoding"),
    Mistake("pe_frequency", "each channel gets its own frequency (10000^(-i/d))",
            "A sine and its cosine share one frequency w_i = 10000^(-2i/d): the exponent runs "
            "over even channel indices (torch.arange(0, d, 2)).", _PE,
            "000 §4; 001 Positional encoding"),
    Mistake("embed_not_scaled", "embeddings are not multiplied by sqrt(d_model)",
            "Embeddings.forward returns lut(x) * sqrt(d_model); without the factor the token "
            "signal is small next to the positional encoding.", "lut(x) * sqrt(d_model)",
            "001 Embeddings; 000 §4"),
    Mistake("embed_divided", "embeddings are divided by sqrt(d_model)",
            "Token embeddings are multiplied by sqrt(d_model); it is attention scores that are "
            "divided by sqrt(d_k).", "lut(x) * sqrt(d_model)", "001 Embeddings"),
    Mistake("ls_over_v", "label smoothing spreads eps over V classes (convention: V - 2)",
            "The Annotated Transformer fills smoothing / (size - 2): the gold class and the "
            "padding class are excluded. Dividing by V is the uniform-mixture convention of "
            "seed 000, a different target.", "true_dist = smoothing / (V - 2), gold 1 - eps, "
            "pad column 0", "001 LabelSmoothing; 000 §6"),
    Mistake("ls_over_v_minus_1", "label smoothing spreads eps over V - 1 classes "
            "(convention: V - 2)", "Excluding only the gold class gives eps / (V - 1); the "
            "Annotated Transformer also excludes the padding class: eps / (V - 2).",
            "true_dist = smoothing / (V - 2)", "001 LabelSmoothing; 000 §6"),
    Mistake("ls_pad_kept", "label smoothing leaves mass on the padding class",
            "The padding column of the target distribution is set to 0, and rows whose target "
            "is padding are zeroed entirely.", "true_dist[:, padding_idx] = 0",
            "001 LabelSmoothing"),
    Mistake("rate_warmup_exponent", "the warm-up term uses warmup^(-1/2), not warmup^(-3/2)",
            "The linear rise is step * warmup^(-3/2), so that it meets step^(-1/2) exactly at "
            "step = warmup.", "lr = d^(-1/2) min(step^(-1/2), step warmup^(-3/2))",
            "000 §6; 001 rate"),
    Mistake("rate_d_exponent", "the schedule scales by d_model^(-1), not d_model^(-1/2)",
            "The schedule's width factor is the inverse square root of d_model.",
            "lr = d^(-1/2) min(step^(-1/2), step warmup^(-3/2))", "000 §6; 001 rate"),
    Mistake("decode_ignores_eos", "the decode loop does not stop at EOS",
            "Generation stops as soon as EOS is produced (it is kept as the last token); "
            "continuing to max_len appends tokens after the end of the sentence.",
            "append argmax of the last logit; stop at EOS or max_len", "004 slides 33, 53"),
    Mistake("decode_drops_last", "the decode loop drops the last token",
            "The loop must run until max_len tokens (or EOS) and keep the last one it "
            "produced; an off-by-one loop bound or a [:-1] loses it.",
            "ys grows by one token per step", "004 slide 53; 001 greedy_decode"),
    Mistake("decode_last_token_only", "the decode loop feeds only the last token",
            "Each step re-runs the decoder on the whole prefix [BOS, y1, ..., y(t-1)] and reads "
            "the logit at the last position; feeding one token loses the context.",
            "decoder(y_<t, z), read position t - 1", "004 slides 42-43"),
    Mistake("mask_not_bool", "the causal mask is a float 0/1 tensor, not bool",
            "nn.MultiheadAttention reads a float attn_mask as numbers added to the scores: "
            "a 1.0 is a small bonus, not a block. The mask must be bool (True = blocked).",
            "torch.triu(torch.ones(T, T), diagonal=1).bool()", "004 slide 47",
            {"causal": "float01"}),
)

_GPT = "x = x + Attn(LN1(x)); x = x + MLP(LN2(x)); logits = LN_f(x) W_E^T"
_GELU = "erf: x/2 (1 + erf(x / sqrt 2)); tanh: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))"
_SAMPLE = "p = softmax(top_k(logits[:, -1] / T)); next ~ multinomial(p)"

# Week 3, the decoder-only model (no seed text: nanoGPT's model.py, GPT-2, the list);
# their variants are gpt.GSpec switches, named in week3.CHANGES
MISTAKES += (
    Mistake("lm_not_causal", "self-attention is not causally masked",
            "A language model predicts token t+1 from tokens up to t: every position may "
            "attend to itself and earlier positions only. Without the mask each position sees "
            "the tokens it is asked to predict, training looks excellent and sampling fails.",
            "M_ij = 0 for j <= i, -inf for j > i", "week 3 (GPT); 004 slide 8"),
    Mistake("gelu_tanh_for_exact", "GELU in its tanh approximation where the exact (erf) form "
            "is used", "nanoGPT's MLP uses nn.GELU(), the exact erf form; GPT-2's tanh form "
            "(gelu_new, nn.GELU(approximate='tanh')) differs by up to about 5e-4 per unit, "
            "enough to break an exact comparison after a few blocks.", _GELU,
            "week 3 (nanoGPT model.py)"),
    Mistake("gelu_exact_for_tanh", "exact GELU where the block declares GPT-2's tanh form",
            "GPT-1 and GPT-2 were trained with the tanh approximation of GELU; the module "
            "declares nn.GELU(approximate='tanh') but the forward computes the exact erf form, "
            "so pretrained GPT-2 weights give slightly different logits.", _GELU,
            "week 3 (GPT-2)"),
    *in_each_sublayer(Mistake(
        "gpt_residual_before_norm", "the residual is added before the norm (post-norm) in a "
        "pre-norm GPT block", "GPT-2 and nanoGPT normalise each sublayer's input and add the "
        "result to the unnormalised stream: x + Attn(LN(x)). Writing LN(x + Attn(x)) is "
        "GPT-1's post-norm arrangement, a different function.", _GPT,
        "week 3 (GPT-2 pre-norm)"), GPT_SUBLAYERS),
    Mistake("gpt_no_final_norm", "the final LayerNorm (ln_f) is missing",
            "A pre-norm stack leaves the residual stream unnormalised; GPT-2 and nanoGPT apply "
            "one last LayerNorm before the output head. Without it the logits are on the "
            "wrong scale.", _GPT, "week 3 (GPT-2 ln_f)"),
    Mistake("gpt_embed_scaled", "token embeddings are multiplied by sqrt(d) in a GPT",
            "The Transformer of 2017 scales its embeddings by sqrt(d_model); GPT-2 and nanoGPT "
            "do not: x = wte[ids] + wpe[pos]. The scale makes tokens dominate positions and "
            "breaks a tied head.", "x0 = wte[ids] + wpe[0..T-1]", "week 3 (GPT-2); 001 "
            "Embeddings"),
    Mistake("conv1d_not_transposed", "GPT-2's Conv1D weights are loaded without transposing",
            "Hugging Face's GPT-2 keeps attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj as "
            "Conv1D weights of shape (in, out), used as x W + b; nn.Linear stores (out, in) and "
            "computes x W^T + b, so each must be transposed when loaded. The square attention "
            "c_proj loads without a shape error when it is not, and every output is wrong.",
            "Linear.weight = Conv1D.weight^T for c_attn, attn.c_proj, c_fc, mlp.c_proj",
            "week 3 (GPT-2 weights; nanoGPT's from_pretrained)"),
    Mistake("cache_position_not_advanced", "the position index is not advanced with the cache",
            "With a key/value cache each step feeds only the new token, so the model cannot "
            "count positions itself: the new token is at position P (the number of tokens "
            "already cached), and P grows by one every step. Leaving it at 0, or at the "
            "prompt's length, gives every new token the same position embedding.",
            "step t: model(x_t, cache, start = P), P = prompt length + t", "week 3 (KV cache)"),
    Mistake("temperature_after_softmax", "the temperature divides the probabilities, not the "
            "logits", "Temperature sharpens or flattens the distribution: softmax(logits / T). "
            "Dividing the probabilities by T after the softmax only rescales them, and "
            "multinomial renormalises: every temperature samples as T = 1.", _SAMPLE,
            "week 3 (sampling)"),
    Mistake("top_k_wrong_count", "top-k keeps one token too many or too few",
            "Top-k keeps exactly the k largest logits: v = topk(logits, k), then everything "
            "below v[:, -1] (the k-th value) is set to -inf. Comparing with the wrong index, "
            "or slicing k - 1 / k + 1 values, keeps a different set.", _SAMPLE,
            "week 3 (sampling)"),
)

_TRANSFER = "P(y | x) = softmax(h_extract W_y); L3 = L2 + lambda L1, lambda = 0.5"
_INPUT = "<s> text <e>; <s> text1 $ text2 <e>"

# Week 3's transfer (GPT-1's fine-tuning: Radford et al. 2018, §3.2-3.3), and a Week 2
# mistake (the missing positional signal) named inside the GPT item
MISTAKES += (
    Mistake("gpt_no_positions", "no position embedding is added (x = wte[ids] only)",
            "Self-attention is blind to order: without a positional signal the model sees a "
            "bag of tokens, and under the causal mask only the count of earlier tokens. GPT "
            "adds a learned position embedding to every token embedding before the blocks.",
            "x0 = wte[ids] + wpe[0..T-1]", "week 2 (positions); week 3 (GPT-2)"),
    Mistake("delimiter_missing", "the delimiter token between the two texts is missing",
            "GPT-1 feeds a pair as one sequence, <s> text1 $ text2 <e>: the delimiter $ tells "
            "the model where the first text ends. Without it the two texts run together and "
            "the pre-trained model cannot tell them apart.", _INPUT, "GPT-1 §3.3"),
    Mistake("start_or_extract_missing", "the start or the extract token is missing",
            "Every input is wrapped in the new tokens: <s> at the front and <e> at the end. "
            "The head reads the final state at <e>; without it the head reads a text token, "
            "whose state is busy predicting the next word.", _INPUT, "GPT-1 §3.3"),
    Mistake("head_wrong_position", "the head reads the wrong position (not the extract "
            "token)", "The classifier reads the final hidden state at each row's extract "
            "token. In a right-padded batch that is not the last position of every row "
            "(h[:, -1] reads padding for the shorter rows), and not the first (h[:, 0], "
            "BERT's habit, has seen only the start token under the causal mask).", _TRANSFER,
            "GPT-1 §3.2"),
    Mistake("lambda_on_task_loss", "lambda weighs the task loss instead of the LM loss",
            "The auxiliary objective is added with weight lambda: L3 = L2 (task) + lambda L1 "
            "(language model). Putting lambda on the task term, lambda L2 + L1, makes the "
            "fine-tuning mostly language modelling.", _TRANSFER, "GPT-1 §3.2"),
    Mistake("lm_loss_counts_padding", "the auxiliary LM loss also averages over padding",
            "The LM loss is the mean over each example's real tokens; padding positions have "
            "no next token to predict. Averaging over them too makes the loss depend on how "
            "the batch was padded.", "L1 = mean over real tokens of -log p(u_i | u_<i)",
            "GPT-1 §3.2"),
)
MISTAKES += SEED_MISTAKES + WEEK3_MISTAKES  # the Llama family's (llama_mistakes)
MISTAKES += LORA_MISTAKES  # LoRA's (lora_mistakes)

BY_NAME = {m.name: m for m in MISTAKES}
