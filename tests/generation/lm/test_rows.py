"""generation.lm.rows: continuous batching's rows. A row gives the same tokens alone and among
15 companions joining and leaving at other steps (float32 rowwise and int8, bit for bit);
end-of-text and stop sequences end rows; penalties, logit bias and prompt scores against
direct computations; greedy against Hugging Face's generate where its margin decides."""

from __future__ import annotations

import pytest
import torch

from conftest import assert_tokens_agree_where_decided, rig_padding
from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.complete import generate
from decoderkit.generation.lm.row import FINISH_LENGTH, FINISH_STOP, Row, Settings
from decoderkit.generation.lm.rows import PREFILL_TOKENS, Rows
from decoderkit.generation.int8 import int8_available
from decoderkit.generation.lm.rowwise import for_inference
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.rowwise import rowwise

V = 50


def lm(seed: int = 0, int8: bool = False, **overrides) -> DecoderOnlyLM:
    """A small float32 GPT-2-shaped LM, its matrices 8x its initialisation's (varied, decided
    continuations; at the init a random model repeats one token), in rowwise kernels (or, with
    ``int8``, the int8 copy ``lm sample --int8`` and the server run)."""
    torch.manual_seed(seed)
    config = LMConfig(**dict(vocab_size=V, n_layers=2, d_model=32, n_heads=4, d_ff=64,
                             max_len=48, dropout=0.0) | overrides)
    model = DecoderOnlyLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0 if p.dim() > 1 else 1.0)
    return for_inference(model, int8)


def run_alone(model, prompt, settings, decode=None) -> Row:
    rows, row = Rows(model), Row(prompt, settings, decode)
    rows.join(row)
    while rows.running:
        rows.step()
    return row


def scored(model, prompts: list[list[int]], new: int) -> dict:
    """Each prompt's greedy tokens with their log-probs and top 2, its rows stepped together."""
    rows, seen = Rows(model), {}
    for p in prompts:
        rows.join(Row(p, Settings(new, greedy=True, logprobs=2)))
    while rows.running:
        for row, t in rows.step():
            seen.setdefault(tuple(row.prompt), []).append((t.id, t.logprob, t.top))
    return seen


def prompts(n: int, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, V, (int(torch.randint(1, 30, (1,), generator=g)),),
                          generator=g).tolist() for _ in range(n)]


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
@pytest.mark.parametrize("settings", [
    Settings(40, seed=7, temperature=0.9, top_k=20, top_p=0.95),
    Settings(40, greedy=True),
    Settings(40, seed=3, presence_penalty=0.5, frequency_penalty=0.3, logit_bias=((4, 2.0),)),
])
@pytest.mark.engines
def test_a_row_alone_equals_the_row_among_15_companions(settings, int8):
    """float32 through the rowwise kernels; int8 through its per-row activation scales
    (``generation.int8.RowScaledInt8``): bit for bit in both."""
    if int8 and not int8_available():
        pytest.skip("no fbgemm int8 engine")
    model = lm(int8=int8)
    target = [3, 14, 15, 9, 26]
    alone = run_alone(model, target, settings).tokens
    rows = Rows(model)
    others = [Row(p, Settings(5 + 3 * i, seed=100 + i, temperature=1.3))
              for i, p in enumerate(prompts(15))]
    for row in others[:6]:
        rows.join(row)
    rows.step()
    rows.step()
    row = Row(target, settings)
    rows.join(row)
    for i, other in enumerate(others[6:]):  # the others arrive while the target runs
        rows.join(other)
        rows.step()
        if i == 3:
            rows.drop(others[0])  # one leaves early (its client went away)
    assert len(rows.running) > 1
    while rows.running:
        rows.step()
    assert row.tokens == alone
    assert len(set(alone)) > 2  # a varied sequence: a wrong cache row would show


@pytest.mark.engines
def test_rows_beyond_the_context_equal_generate_alone():
    model = lm(2, max_len=12)
    ps = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [7], [8, 9, 3]]
    together = generate(model, ps, max_new_tokens=9, seed=[5, 6, 7])
    assert together == [generate(model, [p], max_new_tokens=9, seed=s)[0]
                        for p, s in zip(ps, [5, 6, 7], strict=True)]


@pytest.mark.engines
def test_prompts_prefilled_together_equal_each_prefilled_alone():
    """At GPT-2's width (one layer): prompts that join together are prefilled end to end in
    forwards of up to PREFILL_TOKENS positions (about 1,000 here, and one of 64 alone); each
    row's cache, tokens and log-probs equal its prefill alone bit for bit."""
    model = lm(3, vocab_size=100, n_layers=1, d_model=768, n_heads=12, d_ff=3072,
               max_len=512)
    g = torch.Generator().manual_seed(4)
    lengths = [64, 1, 64, 300, 17, 64, 250, 200, 100, 64]
    assert sum(lengths) > PREFILL_TOKENS
    ps = [torch.randint(0, 100, (n,), generator=g).tolist() for n in lengths]

    def prefilled(groups):
        rows, out = Rows(model), []
        for group in groups:
            for p in group:
                rows.join(Row(p, Settings(50, greedy=True)))
            rows.step()  # prefills the rows that joined, then chooses
        for i, row in enumerate(rows.running):
            keys = [rows.cache.keys[0][layer, i, :, :len(row.prompt)]
                    for layer in range(model.config.n_layers)]
            out.append((row.prompt, keys))
        return sorted(out, key=lambda o: (len(o[0]), o[0]))

    alone, together = prefilled([[p] for p in ps]), prefilled([ps])
    for (p, keys), (q, other) in zip(alone, together, strict=True):
        assert p == q and all(torch.equal(a, b) for a, b in zip(keys, other, strict=True))
    assert scored(model, ps, 4) == {k: v for p in ps for k, v in scored(model, [p], 4).items()}


@pytest.mark.engines
def test_a_llama_shaped_row_at_an_odd_ffn_width_scores_alike_alone_and_together():
    """SwiGLU at an FFN width of 40 (no multiple of the activation's vector loop): each row's
    tokens and log-probs stepped beside 4 others equal it stepped alone, bit for bit."""
    model = lm(5, d_ff=40, ffn="gated", activation="swish", norm="rms", positions="rope",
               bias=False, n_kv_heads=2)
    ps = prompts(5, seed=9)
    together = scored(model, ps, 6)
    assert len(together) == 5
    assert together == {k: v for p in ps for k, v in scored(model, [p], 6).items()}


def test_end_of_text_ends_the_row_and_is_not_in_the_output():
    model = lm()
    free = run_alone(model, [1, 2], Settings(20, greedy=True)).tokens
    eos = free[3]
    first = free.index(eos)
    row = run_alone(model, [1, 2], Settings(20, greedy=True, eos_ids=frozenset({eos})))
    assert row.tokens == free[:first + 1] and row.finish_reason == FINISH_STOP
    assert row.output == free[:first]
    assert generate(model, [[1, 2]], max_new_tokens=20, greedy=True, eos_id=eos) == \
        [free[:first + 1]]


def letters(ids: list[int]) -> str:
    """A decode where each id is two letters, so a stop can begin inside a token."""
    return "".join(chr(97 + i % 26) + chr(97 + (i * 7) % 26) for i in ids)


def test_a_stop_sequence_spanning_tokens_never_reaches_the_text():
    model = lm()
    free = run_alone(model, [5, 6], Settings(30, greedy=True), letters)
    text = free.text
    stop = text[9:12]  # starts inside token 4, ends inside token 5
    cut = text.index(stop)
    row, pieces = Row([5, 6], Settings(30, greedy=True, stop=(stop, "never-there")), letters), []
    rows = Rows(model)
    rows.join(row)
    while rows.running:
        pieces += [token.text for _, token in rows.step()]
    assert row.text == text[:cut] == "".join(pieces)
    assert stop not in "".join(pieces) and row.finish_reason == FINISH_STOP
    assert letters(row.output) == text[:2 * len(row.output)] and 2 * len(row.output) <= cut
    length = run_alone(model, [5, 6], Settings(6, greedy=True, stop=("zzzz",)), letters)
    assert length.finish_reason == FINISH_LENGTH and length.text == letters(length.tokens)


def test_penalties_and_bias_change_the_logits_as_openai_documents():
    model = lm()
    bias = Settings(1, greedy=True, logit_bias=((11, 100.0),))
    assert run_alone(model, [1], bias).tokens == [11]
    penalised = run_alone(model, [1, 2], Settings(30, greedy=True, frequency_penalty=2.0))
    plain = run_alone(model, [1, 2], Settings(30, greedy=True))
    assert max(map(penalised.tokens.count, penalised.tokens)) < \
        max(map(plain.tokens.count, plain.tokens))


def test_prompt_scores_are_the_models_log_softmax():
    model = lm()
    prompt = [4, 8, 15, 16, 23, 42]
    row = run_alone(model, prompt, Settings(0, logprobs=3, prompt_logprobs=True))
    with torch.inference_mode():
        want = model(torch.tensor([prompt]))[0].double().log_softmax(-1)  # (L, V)
    assert row.tokens == [] and row.finish_reason == FINISH_LENGTH
    assert row.prompt_scores[0].logprob is None and len(row.prompt_scores) == len(prompt)
    for t, score in enumerate(row.prompt_scores[1:]):
        assert abs(score.logprob - float(want[t, prompt[t + 1]])) <= 1e-5
        assert [i for i, _ in score.top] == want[t].topk(3).indices.tolist()


def test_chosen_token_logprobs_and_top_alternatives():
    model = lm()
    row = Rows(model)
    r = Row([1, 2, 3], Settings(2, greedy=True, logprobs=2))
    row.join(r)
    (_, token), = row.step()
    assert token.top[0][0] == token.id and token.logprob == pytest.approx(token.top[0][1])


def test_warm_up_leaves_nothing_running_and_changes_no_row():
    model = lm()
    before = run_alone(model, [1, 2], Settings(8, greedy=True)).tokens
    rows = Rows(model)
    rows.warm_up()
    row = Row([1, 2], Settings(8, greedy=True))
    assert rows.running == []
    rows.join(row)
    while rows.running:
        rows.step()
    assert row.tokens == before


transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_equals_transformers_generate_where_its_margin_decides(tmp_path, seed):
    from decoderkit.interop.gpt.hf import load_hf_gpt

    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=97, n_positions=64, n_embd=32, n_layer=2,
                                     n_head=4, tie_word_embeddings=seed != 1)
    hf = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # off the init: varied, decided continuations
        for p in hf.parameters():
            p.mul_(8.0 if p.dim() > 1 else 1.0)
    hf.save_pretrained(tmp_path)
    ours = rowwise(load_hf_gpt(tmp_path)[0])
    ps = [[3, 50, 7, 81, 12], [9], [40, 41, 42]]
    want, margins = [], []
    with torch.no_grad():
        for prompt in ps:
            out = hf.generate(torch.tensor([prompt]), max_new_tokens=20, min_new_tokens=20,
                              do_sample=False, pad_token_id=0, eos_token_id=None,
                              output_scores=True, return_dict_in_generate=True)
            want.append(out.sequences[0, len(prompt):].tolist())
            margins.append([float(s[0].topk(2).values.diff().neg()) for s in out.scores])
    got = generate(ours, ps, max_new_tokens=20, greedy=True)
    assert_tokens_agree_where_decided(want, got, margins, 1e-4, at_least=1)



def test_log_probs_are_over_the_usable_ids_alone():
    """With ``usable_vocab`` n, the chosen tokens' log p and alternatives and the prompt's
    scores are the log-softmax over the first n logits (float64 reference), though the
    padded rows lead: no padded id is chosen or listed."""
    n, prompt = 30, [4, 8, 15, 16, 23]
    torch.manual_seed(0)
    model = DecoderOnlyLM(LMConfig(vocab_size=n + 64, n_layers=2, d_model=32, n_heads=4,
                                   d_ff=64, max_len=48, dropout=0.0)).eval()
    rig_padding(model.generator.proj.weight, n)
    rows, row = Rows(model), Row(prompt, Settings(3, greedy=True, logprobs=4,
                                                  prompt_logprobs=True, usable_vocab=n))
    rows.join(row)
    chosen = []
    while rows.running:
        chosen += [token for _, token in rows.step()]
    with torch.inference_mode():
        full = model(torch.tensor([prompt + row.tokens]))[0].double()  # (L, V)
    assert int(full[0].argmax()) >= n  # the padding would win unchecked
    want = full[:, :n].log_softmax(-1)
    scored = list(zip(prompt[1:] + row.tokens, row.prompt_scores[1:] + chosen, strict=True))
    assert len(scored) == len(prompt) + 2
    for t, (token, got) in enumerate(scored):
        assert got.id == token < n
        assert abs(got.logprob - float(want[t, token])) <= 1e-5
        assert [i for i, _ in got.top] == want[t].topk(4).indices.tolist()


@pytest.mark.parametrize("prompt,usable,message", [
    ([1, V], None, f"prompt, position 1: token id {V} is outside the vocabulary \\[0, {V}\\)"),
    ([3, 40, 2], 30, "prompt, position 1: token id 40 is outside the vocabulary \\[0, 30\\)"),
    ([], None, "prompt must be a non-empty list"),
])
def test_join_refuses_a_prompt_id_outside_the_usable_vocabulary(prompt, usable, message):
    """Rows used directly (not through generate or the server): a prompt id past the model's
    rows, or past the tokenizer's with a padded vocabulary, is one line, not an IndexError."""
    rows = Rows(lm())
    settings = Settings(2, greedy=True, prompt_logprobs=True, logprobs=0, usable_vocab=usable)
    with pytest.raises(UsageError, match=message):
        rows.join(Row(prompt, settings))
    assert not rows.running


def test_dropping_a_row_that_left_beside_its_twin_drops_nothing():
    """Two rows of one prompt and settings (a request's n = 2, greedy): dropping one that has
    already left (its client gone after it finished) compared it with its running twin field
    by field, tensors included, and the server's worker died (schemathesis found it: "Boolean
    value of Tensor with more than one value is ambiguous"); rows are found by identity."""
    rows = Rows(lm())
    twins = [Row([3, 5, 7], Settings(8, greedy=True)) for _ in range(2)]
    for row in twins:
        rows.join(row)
    rows.step()
    rows.drop(twins[1])
    rows.drop(twins[1])  # gone already: a no-op
    assert rows.running == [twins[0]] and twins[0] != twins[1]


def test_a_prefills_freed_memory_is_handed_back_once_its_tokens_are_shown(monkeypatch):
    """The trim of a prefill's freed memory (``release_freed_memory``, 10-16 ms after a
    200-position prefill of 30 layers) runs after ``on_chosen`` has the first tokens, once a
    step that prefilled, not in the time to the first token; a step that prefilled nothing
    does not trim."""
    import decoderkit.generation.lm.rows as rows_module

    order = []
    monkeypatch.setattr(rows_module, "release_freed_memory", lambda: order.append("trim"))
    rows = Rows(lm())
    for prompt in prompts(2):
        rows.join(Row(prompt, Settings(3, greedy=True)))
    rows.step(lambda events: order.append(len(events)))
    rows.step(lambda events: order.append(len(events)))
    assert order == [2, "trim", 2]
