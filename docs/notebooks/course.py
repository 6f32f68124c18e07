"""The cells of the course notebooks (see build.py): the seeds' exercises re-stated in our
own words, each followed by a grade(...) cell."""

IMPORTS = ("code", "import math\n\nimport numpy as np\nimport torch\nimport torch.nn as nn\n"
           "import torch.nn.functional as F\n\nfrom decoderkit.grade import grade")
BLANK = "    raise NotImplementedError  # your code here"
METHOD = "    " + BLANK  # the same, in a method

DECODER_002 = [
    ("md", """
# One decoder block, by hand (seed 002)

Write `transformer_decoder(X, enc_out, gamma1, beta1, gamma2, beta2, gamma3, beta3, W1, b1, W2, b2)`:
a single-head, unbatched, **pre-norm** decoder block with no projection matrices.

* `LN(x) = gamma (x - mean) / sqrt(var + 1e-5) + beta`, per row, variance divided by D.
* Stage 1: `H1 = LN(X)`; causal self-attention `softmax(H1 H1^T / sqrt(D))` (row i sees
  j <= i), `X1 = X + weights @ H1`.
* Stage 2: `H2 = LN(X1)`; attention to `enc_out` (all positions, `enc_out` as it is),
  `X2 = X1 + weights @ enc_out`.
* Stage 3: `H3 = LN(X2)`; `X2 + relu(H3 W1 + b1) W2 + b2`.

Keep the inputs' dtype, leave them unchanged. Run the grade cell after your function."""),
    IMPORTS,
    ("exercise", """
def layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return gamma * (x - mean) / torch.sqrt(var + 1e-5) + beta


def transformer_decoder(X, enc_out, gamma1, beta1, gamma2, beta2, gamma3, beta3, W1, b1, W2, b2):
    T, D = X.shape
    h1 = layer_norm(X, gamma1, beta1)
    scores = h1 @ h1.T / math.sqrt(D)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    x1 = X + torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ h1
    h2 = layer_norm(x1, gamma2, beta2)
    x2 = x1 + torch.softmax(h2 @ enc_out.T / math.sqrt(D), dim=-1) @ enc_out
    h3 = layer_norm(x2, gamma3, beta3)
    return x2 + torch.relu(h3 @ W1 + b1) @ W2 + b2
""", f"""
def transformer_decoder(X, enc_out, gamma1, beta1, gamma2, beta2, gamma3, beta3, W1, b1, W2, b2):
{BLANK}
"""),
    ("grade", "grade(transformer_decoder)"),
    ("md", """
The library's own version is `decoderkit.nn.exercise.transformer_decoder`; the grader
compares yours with it on seeded cases (T = 1, S != T, D = F, float32 and float64, a nearly
constant row where the place of eps matters) and, when they differ, with every known
mistake on the same inputs."""),
]

BLOCK_004 = [
    ("md", """
# The decoder block and generation (seed 004)

Milestones of the lesson, on `nn.MultiheadAttention(batch_first=True)`, whose boolean masks
mean **True = blocked**:

1. `build_causal_mask(T)`: a (T, T) bool mask, True above the diagonal.
2. `DecoderBlock(d, H, d_ff)`: post-norm, `x1 = LN(x + SelfAttn(x, mask))`,
   `x2 = LN(x1 + CrossAttn(x1, z))`, `LN(x2 + FFN(x2))`, FFN = Linear, ReLU, Linear.
3. `autoregressive_decode(model, src, max_len)`: start from `[1]` (BOS), append the argmax of
   `model.decode_step(prefix, enc_out)[0, -1]` until EOS (2, kept) or `max_len` tokens."""),
    IMPORTS,
    ("exercise", """
def build_causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)
""", f"""
def build_causal_mask(T):
{BLANK}
"""),
    ("grade", "grade(build_causal_mask)"),
    ("exercise", """
class DecoderBlock(nn.Module):
    def __init__(self, d, H, d_ff):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, H, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d, H, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.ReLU(), nn.Linear(d_ff, d))
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x, z, mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, attn_mask=mask)[0])
        x = self.norm2(x + self.cross_attn(x, z, z)[0])
        return self.norm3(x + self.ffn(x))


def autoregressive_decode(model, src, max_len=8):
    enc_out = model.encode(src)
    ids = [1]
    for _ in range(max_len):
        token = model.decode_step(torch.tensor([ids]), enc_out)[0, -1].argmax().item()
        ids.append(token)
        if token == 2:
            break
    return ids
""", f"""
class DecoderBlock(nn.Module):
    def __init__(self, d, H, d_ff):
        super().__init__()
{METHOD}

    def forward(self, x, z, mask=None):
{METHOD}


def autoregressive_decode(model, src, max_len=8):
{BLANK}
"""),
    ("grade", "grade(DecoderBlock, autoregressive_decode)"),
]

ANNOTATED_001 = [
    ("md", """
# The Annotated Transformer's pieces beside decoderkit's (seed 001)

The walk-through builds `attention`, `subsequent_mask` and its own `LayerNorm`; decoderkit
has the same pieces in `decoderkit.nn`. Its conventions: masks are 1/True where a position
**may** attend, blocked scores get -1e9, and its LayerNorm divides by `std + eps` with
`x.std(-1)` (D - 1 in the variance), eps 1e-6."""),
    IMPORTS,
    ("exercise", """
def subsequent_mask(size):
    return torch.ones(1, size, size, dtype=torch.bool).tril()


def attention(query, key, value, mask=None, dropout=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return p_attn @ value, p_attn
""", f"""
def subsequent_mask(size):
{BLANK}


def attention(query, key, value, mask=None, dropout=None):
{BLANK}
"""),
    ("grade", "grade(attention, subsequent_mask)"),
    ("md", "Side by side with decoderkit's mask (True = may attend):"),
    ("code", """
if __name__ == "__main__":  # not when the whole notebook is graded: it is no answer of yours
    from decoderkit.nn.masks import causal_mask

    print(causal_mask(4).int())"""),
    ("exercise", """
class LayerNorm(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean, std = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2
""", f"""
class LayerNorm(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
{METHOD}

    def forward(self, x):
{METHOD}
"""),
    ("grade", "grade(LayerNorm)"),
]

NUMBERS_000 = [
    ("md", """
# The numbers of the Week 2 notes (seed 000)

Sinusoidal positions: `PE(p, 2i) = sin(p w_i)`, `PE(p, 2i+1) = cos(p w_i)`,
`w_i = 10000^(-2i/d)`. Write `numpy_pe(pos, d)` in NumPy, returning a `(len(pos), d)` array."""),
    IMPORTS,
    ("exercise", """
def numpy_pe(pos, d):
    angle = np.asarray(pos, dtype=float)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
    table = np.zeros((len(pos), d))
    table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
    return table
""", f"""
def numpy_pe(pos, d):
{BLANK}
"""),
    ("grade", "grade(numpy_pe)"),
    ("md", """
Two facts from the notes, computed with decoderkit: a fixed offset k is a rotation of every
(sin, cos) pair, and the parameters of the base model's layers."""),
    ("code", """
if __name__ == "__main__":  # not when the whole notebook is graded: it is no answer of yours
    from decoderkit.nn.embeddings import sinusoidal_encoding
    from decoderkit.report.params import decoder_layer_parameters, encoder_layer_parameters

    pe = sinusoidal_encoding(60, 16, torch.float64)
    w = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    k = 7
    c, s = torch.cos(k * w), torch.sin(k * w)
    rotated = torch.stack([pe[:-k, 0::2] * c + pe[:-k, 1::2] * s,
                           pe[:-k, 1::2] * c - pe[:-k, 0::2] * s], -1).reshape(-1, 16)
    print("PE(p + 7) is a rotation of PE(p):", torch.allclose(rotated, pe[k:], atol=1e-12))
    layers = 6 * (encoder_layer_parameters(512, 2048) + decoder_layer_parameters(512, 2048))
    print(f"the base model's 6 + 6 layers (d_model 512, d_ff 2048): {layers:,} parameters")"""),
]

GPT_W3 = [
    ("md", """
# Week 3: GPT from the same blocks

A decoder block without cross-attention, stacked under a causal mask, is GPT. First
decoderkit's own model (`decoderkit.nn.lm.DecoderOnlyLM`) trains for a minute on
Shakespeare and samples; then you write the pieces in nanoGPT's layout and grade them.
The parameters below are what the test suite shortens; the training and sampling cells run
under `if __name__ == "__main__":`, so that `decoderkit grade week3_gpt.ipynb` (which runs
the notebook as a module, under time limits) grades your classes without training."""),
    ("code", """
TEXT = "../../tests/fixtures/shakespeare_hamlet.txt"  # or the output of `decoderkit lm data`
TRAIN_SECONDS = 60  # wall-clock budget of the training cell
MAX_STEPS = 100_000  # or stop after this many steps"""),
    IMPORTS,
    ("code", """
import time

if __name__ == "__main__":  # Jupyter runs this; `decoderkit grade` on the whole notebook does not
    from decoderkit.nn.lm.model import DecoderOnlyLM
    from decoderkit.nn.lm.presets import lm_preset

    text = open(TEXT, encoding="utf-8").read()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text])
    torch.manual_seed(0)
    config = lm_preset("nanogpt", vocab_size=len(chars), n_layers=2, d_model=64, n_heads=4,
                       d_ff=256, max_len=64, dropout=0.0)
    model = DecoderOnlyLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    start, step = time.time(), 0
    while time.time() - start < TRAIN_SECONDS and step < MAX_STEPS:
        rows = torch.randint(0, len(data) - 65, (16,))
        batch = torch.stack([data[r:r + 65] for r in rows])
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, len(chars)), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 0:
            first_loss = loss.item()
        step += 1
    print(f"{step} steps: loss {first_loss:.2f} -> {loss.item():.2f}")"""),
    ("code", """
if __name__ == "__main__":
    model.eval()
    ids = torch.tensor([[chars.index(c) for c in "HAMLET."]])
    with torch.no_grad():
        for _ in range(80):
            probs = torch.softmax(model(ids[:, -64:])[:, -1] / 0.8, dim=-1)
            ids = torch.cat([ids, torch.multinomial(probs, 1)], dim=1)
    print("".join(chars[i] for i in ids[0]))"""),
    ("md", """
## Your GPT, in nanoGPT's layout

`GPTConfig` is given. Write `CausalSelfAttention(config)` (one `c_attn` linear to q, k, v,
`c_proj` out, position i sees j <= i), `Block(config)` (pre-norm: `x + attn(ln_1(x))`,
`x + mlp(ln_2(x))`, the MLP `c_fc`, `nn.GELU()`, `c_proj`, width 4 d), `GPT(config)`
(`forward(idx, targets)` returning `(logits, loss)`: `wte[idx] + wpe[pos]`, the blocks,
`ln_f`, `lm_head`) and its `generate` method (crop to `block_size`, divide the last logits by
`temperature`, keep the `top_k` largest, softmax, `torch.multinomial`)."""),
    ("code", """
from dataclasses import dataclass


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 65
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = True"""),
    ("exercise", """
class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.n_head, self.n_embd = config.n_head, config.n_embd

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.c_attn(x).split(self.n_embd, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, T, d_k)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))
""", f"""
class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
{METHOD}

    def forward(self, x):
{METHOD}
"""),
    ("grade", "grade(CausalSelfAttention)"),
    ("exercise", """
class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = nn.Sequential(nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias),
                                 nn.GELU(),
                                 nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))
""", f"""
class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
{METHOD}

    def forward(self, x):
{METHOD}
"""),
    ("grade", "grade(Block)"),
    ("exercise", """
class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias)))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.size(1))
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None if targets is None else F.cross_entropy(
            logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size:])
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            idx = torch.cat([idx, torch.multinomial(F.softmax(logits, dim=-1), 1)], dim=1)
        return idx
""", f"""
class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
{METHOD}

    def forward(self, idx, targets=None):
{METHOD}

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
{METHOD}
"""),
    ("grade", "grade(GPT)"),
    ("grade", "grade(GPT.generate)"),
]

NOTEBOOKS = {
    "002_decoder_function": DECODER_002,
    "004_decoder_block": BLOCK_004,
    "001_annotated_side_by_side": ANNOTATED_001,
    "000_numbers": NUMBERS_000,
    "week3_gpt": GPT_W3,
}
