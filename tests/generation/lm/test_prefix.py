"""generation.lm.prefix: a row started from a stored prefix of its prompt gives the tokens and
log-probabilities of the row prefilled whole, bit for bit (rowwise float32 and int8, GPT-2 and
Llama shapes; prefixes of one id, whole blocks, ending mid-prompt and the prompt but its last
id), and prefills only the rest; unchunked, the reused rows move. The store: bounded in bytes,
least recently used out, a shared prefix held once, adapters apart."""

from __future__ import annotations

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.generation.int8 import int8_available
from decoderkit.generation.lm.prefix import (
    PREFIX_BLOCK,
    Prefix,
    PrefixStore,
    check_prefix_cache_mb,
    reusable,
)
from decoderkit.generation.lm.row import Row, Settings
from decoderkit.generation.lm.rows import Rows
from decoderkit.generation.lm.rowwise import for_inference
from decoderkit.nn import cache as nn_cache
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig

V = 50
LLAMA = dict(norm="rms", ffn="gated", positions="rope", bias=False, tie_head=False,
             activation="swish", n_kv_heads=2, d_ff=64)


def lm(llama: bool, int8: bool = False) -> DecoderOnlyLM:
    """A small float32 LM (GPT-2 or Llama-shaped), its matrices 4x the initialisation's
    (decided, varied continuations), as the server runs it."""
    torch.manual_seed(3)
    config = LMConfig(**dict(vocab_size=V, n_layers=2, d_model=32, n_heads=4, d_ff=64,
                             max_len=96, dropout=0.0) | (LLAMA if llama else {}))
    model = DecoderOnlyLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0 if p.dim() > 1 else 1.0)
    return for_inference(model, int8)


def ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def run(model, row: Row, prefixes: PrefixStore | None = None) -> tuple[list, int]:
    """``row`` run to its end alone: its (token, log p, top) each; the positions prefilled."""
    rows, out = Rows(model, prefixes), []
    rows.join(row)
    while rows.running:
        out += [(t.id, t.logprob, t.top) for _, t in rows.step()]
    return out, rows.prefilled


def stored(model, prompt: list[int]) -> Prefix:
    """The keys and values of ``prompt``, prefilled alone (another prompt's, to start from)."""
    rows = Rows(model)
    rows.join(Row(prompt, Settings(1, greedy=True)))
    rows.step()
    return Prefix(len(prompt), *rows.cache.read_prefix(0, len(prompt)))


def first_logits(model, row: Row) -> torch.Tensor:
    rows = Rows(model)
    rows.join(row)
    rows.step()
    return row.next_logits


SETTINGS = [Settings(12, greedy=True, logprobs=3),
            Settings(12, seed=5, temperature=0.9, top_p=0.95, logprobs=2)]


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
@pytest.mark.parametrize("llama", [False, True], ids=["gpt2", "llama"])
def test_a_row_from_a_prefix_equals_the_row_prefilled_whole(llama, int8):
    if int8 and not int8_available():
        pytest.skip("no int8 engine here")
    model = lm(llama, int8)
    cases = 0
    B = PREFIX_BLOCK  # whole blocks, mid-block, past the last whole block
    for length, shared in [(B + 24, 1), (B + 24, B), (B + 24, B + 5), (2 * B + 15, 2 * B),
                           (2 * B + 15, 2 * B + 14), (B + 1, B), (2 * B, 2 * B - 1)]:
        prompt = ids(length, length)
        prefix = stored(model, prompt[:shared] + ids(length - shared + 5, 99))  # diverges
        for settings in SETTINGS:
            whole, prefilled = run(model, Row(prompt, settings))
            reused, rest = run(model, Row(prompt, settings, prefix=Prefix(
                shared, prefix.keys, prefix.values)))
            assert whole == reused  # ids, log-probs and the top ones, exactly
            assert prefilled == length and rest == length - reusable(shared, length)
            cases += rest < length
    assert cases >= 8  # rows that did start from a prefix


def test_unchunked_the_reused_row_moves(monkeypatch):
    """The parity: one attention call for a whole prompt (no chunks) rounds a position by the
    call's length (under 8 queries the reference formula, not SDPA), and a row from a prefix
    no longer equals the row prefilled whole."""
    monkeypatch.setattr(nn_cache, "prefill_chunks", lambda a, b: [(a, b)])
    model, moved = lm(True), 0
    for length, shared in [(35, 32), (50, 48), (20, 16), (37, 32), (66, 64)]:
        prompt = ids(length, length)
        whole = first_logits(model, Row(prompt, Settings(1, greedy=True)))
        part = first_logits(model, Row(prompt, Settings(1, greedy=True),
                                       prefix=stored(model, prompt[:shared])))
        moved += not torch.equal(whole, part)
    assert moved >= 2


def block_bytes(model) -> int:
    c = model.config
    return 2 * c.n_layers * c.kv_heads * PREFIX_BLOCK * c.d_head * 4  # keys and values


def test_rows_with_a_store_start_from_a_shared_prompt_and_equal_without():
    model, system, B = lm(True), ids(2 * PREFIX_BLOCK + 8, 7), PREFIX_BLOCK
    store = PrefixStore(1 << 30)
    for n, seed in [(5, 1), (7, 2), (3, 3)]:
        prompt = system + ids(n, seed)
        alone, _ = run(model, Row(prompt, SETTINGS[1]))
        shared, prefilled = run(model, Row(prompt, SETTINGS[1]), store)
        assert shared == alone
    assert store.hits == 2 and store.reused == 2 * 2 * B and prefilled == len(prompt) - 2 * B
    assert store.bytes == 2 * block_bytes(model)  # the system prompt's two blocks, once
    assert store.longest("other", system + [1]) is None  # another adapter's keys differ


def test_the_store_keeps_its_budget_least_recently_used_out():
    model = lm(False)
    store = PrefixStore(5 * block_bytes(model))
    B = PREFIX_BLOCK
    a, b, c = ids(2 * B, 1), ids(2 * B, 2), ids(2 * B, 3)
    for prompt in (a, b):
        run(model, Row(prompt, Settings(1, greedy=True)), store)
    assert store.longest(None, a + [0]).length == 2 * B  # a is now the most recent
    run(model, Row(c, Settings(1, greedy=True)), store)  # 6 blocks: b's last block out
    assert store.bytes <= store.budget and store.longest(None, b + [0]).length == B
    assert store.longest(None, a + [0]).length == 2 * B
    assert store.longest(None, c + [0]).length == 2 * B


@pytest.mark.parametrize("value", [0, -1, 1.5, True, (1 << 20) + 1])
def test_the_budget_is_refused_outside_its_range(value):
    with pytest.raises(UsageError, match=r"\(--prefix-cache-mb\) must be an integer in \[1, "):
        check_prefix_cache_mb(value)
    assert check_prefix_cache_mb(1) == 1
