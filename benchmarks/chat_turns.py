"""Time to first token as a chat grows (issue 44's chat goal: turn 10's at most 1.3x turn 1's,
and at most llama-cpp-python's at turn 10): ours with prefix reuse on, ours with it off and
llama-cpp-python's ``Llama`` on the same model, in one run.

A random Llama-family model of one of ``llama_cpu.SHAPES`` (``--layers`` fewer layers for a
quick run), with ``lm_serve``'s synthetic BPE of its whole vocabulary and SmolLM2's ChatML
template, talks for ``--turns`` turns: each turn a user message of ``--user`` random one-token
words joins the conversation, the engine answers ``--reply`` greedy tokens (every end id
banned, so each reply is that long) and its answer's text joins it too (ten turns of 130 +
48, the replies' text re-encoded to about 57 ids: a conversation of about 2,000 tokens).
Ours: ``generation.lm.conversation.Conversation``, what ``lm chat`` runs (the conversation
rendered by the template, one ``Row`` on ``Rows``), with its ``PrefixStore`` (reuse on: a
turn prefills the last reply and the new message) and without (``--no-prefix-reuse``: the
whole conversation prefilled every turn); llama.cpp:
llama-cpp-python's ``Llama`` on our ``lm export --to gguf`` float32 file, the same rendering,
``Llama.generate(ids, reset=True)``, which reuses the longest prefix of the ids it evaluated
before (its prefix reuse, on by default), greedy (top_k 1), the end ids banned by a logits
processor. Each engine first answers a throwaway message as long as the others (its
first-call costs: OpenMP's team, oneDNN's kernels, llama.cpp's buffers, the template's
process; nothing shared with the conversation). Time to first token: from the user's message
to the first token's choice, the template's render and tokenizing included (ours: the first
token ``Conversation.say`` shows; llama.cpp: the generator's first token).

    .venv/bin/python benchmarks/chat_turns.py [--shape smollm2-135m] [--layers N]
        [--turns 10] [--user 130] [--reply 48] [--threads 2]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from llama_cpu import SHAPES  # noqa: E402
from lm_serve import CHATML, chat_tokenizer, one_token_words  # noqa: E402

from decoderkit.generation.lm.conversation import Conversation  # noqa: E402
from decoderkit.generation.lm.prefix import DEFAULT_PREFIX_CACHE_MB  # noqa: E402
from decoderkit.generation.lm.row import Settings  # noqa: E402
from decoderkit.generation.lm.rowwise import for_inference  # noqa: E402
from decoderkit.nn.lm.model import DecoderOnlyLM  # noqa: E402
from decoderkit.text.lm.chat import ChatTemplate  # noqa: E402

ON, OFF, PEER = "ours reuse on", "ours reuse off", "llama.cpp f32"


def ours(model, tokenizer, chat: ChatTemplate, texts: list[str], warm: str,
         settings: Settings, reuse: bool) -> tuple[list[float], list[int]]:
    """Each turn's (time to first token, prompt length) in ``Conversation``, prefix reuse
    ``reuse`` (its default store; off: none), after a throwaway turn saying ``warm``."""
    mb = DEFAULT_PREFIX_CACHE_MB if reuse else None  # lm chat's default, or off
    Conversation(model, tokenizer, chat, replace(settings, max_new_tokens=2),
                 prefix_cache_mb=mb).say(warm)  # its own store: nothing shared
    talk = Conversation(model, tokenizer, chat, settings, prefix_cache_mb=mb)
    firsts, lengths = [], []
    for text in texts:
        lengths.append(len(chat.encode(tokenizer, talk.messages + [
            {"role": "user", "content": text}])))
        stamps: list[float] = []
        begin = time.perf_counter()
        talk.say(text, lambda piece, stamps=stamps: stamps.append(time.perf_counter()))
        firsts.append(stamps[0] - begin)
    return firsts, lengths


def llamacpp(path: Path, tokenizer, chat: ChatTemplate, texts: list[str], warm: str,
             reply: int, threads: int, context: int,
             banned: list[int]) -> tuple[list[float], list[int]]:
    """Each turn's (time to first token, prompt length) in llama-cpp-python's ``Llama``
    (prefix reuse on), after a throwaway answer to ``warm``'s ids (no template: no prefix
    shared with the first turn)."""
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=context, n_threads=threads,
                n_threads_batch=threads, n_batch=512, verbose=False)

    def ban(ids, scores):
        scores[banned] = -np.inf
        return scores

    def answer(ids: list[int], count: int, stamps: list[float]) -> list[int]:
        out = []
        for token in llm.generate(ids, top_k=1, temp=0.0, reset=True, logits_processor=[ban]):
            stamps.append(time.perf_counter())
            out.append(token)
            if len(out) == count:
                return out
        raise RuntimeError(f"llama.cpp stopped after {len(out)} tokens, not {count}")

    chat.encode(tokenizer, [{"role": "user", "content": warm}])  # the template's process
    answer(tokenizer.encode(warm), 2, [])
    messages: list[dict] = []
    firsts, lengths = [], []
    for text in texts:
        stamps: list[float] = []
        begin = time.perf_counter()
        messages.append({"role": "user", "content": text})
        ids = chat.encode(tokenizer, messages)
        out = answer(ids, reply, stamps)
        firsts.append(stamps[0] - begin)
        lengths.append(len(ids))
        messages.append({"role": "assistant", "content": tokenizer.decode(out, skip_special=True)})
    return firsts, lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="smollm2-135m")
    parser.add_argument("--layers", type=int, help="fewer layers than the shape's")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--user", type=int, default=130, help="tokens per user message")
    parser.add_argument("--reply", type=int, default=48, help="tokens per reply")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = SHAPES[args.shape]
    if args.layers:
        config = replace(config, n_layers=args.layers)
    # a reply's text re-encodes to about 1.2x its ids; the template's ~10 tokens a turn
    context = args.turns * (args.user + args.reply * 5 // 4 + 10) + 20
    if context > config.max_len:
        raise SystemExit(f"--turns x (--user + 1.25 x --reply + 10) + 20 = {context} is past "
                         f"the context {config.max_len}")
    torch.manual_seed(0)
    model = DecoderOnlyLM(config).eval()
    tokenizer = chat_tokenizer(config.vocab_size)
    chat = ChatTemplate(CHATML, {"eos_token": "<|im_end|>"})
    banned = sorted(tokenizer.end_ids | chat.end_ids(tokenizer))
    settings = Settings(args.reply, greedy=True, logit_bias=tuple((i, -1e9) for i in banned))
    words, draw = one_token_words(tokenizer), random.Random(1)
    texts = ["".join(" " + w for w in draw.sample(words, args.user))
             for _ in range(args.turns + 1)]  # the last: the warm-up's
    results: dict[str, tuple[list[float], list[int]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            print("llama-cpp-python: not installed")
        else:
            from decoderkit.interop.gguf.export import export_gguf

            export_gguf(model, tokenizer, Path(tmp) / "gguf")
            results[PEER] = llamacpp(Path(tmp) / "gguf" / "model.gguf", tokenizer, chat,
                                     texts[:-1], texts[-1], args.reply, args.threads,
                                     config.max_len, banned)
    inference = for_inference(model)
    for name, reuse in ((ON, True), (OFF, False)):
        results[name] = ours(inference, tokenizer, chat, texts[:-1], texts[-1], settings, reuse)
    print(f"{args.shape} shape ({config.n_layers} layers, width {config.d_model}), {args.turns} "
          f"turns of {args.user} + {args.reply} tokens, ChatML, greedy, {args.threads} threads, "
          f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f}")
    names = list(results)
    print(f"  {'turn':>4} " + " ".join(f"{n + ' prompt, TTFT ms':>30}" for n in names))
    for t in range(args.turns):
        print(f"  {t + 1:>4} " + " ".join(
            f"{results[n][1][t]:>19} {results[n][0][t] * 1e3:10.0f}" for n in names))
    on, off = results[ON][0], results[OFF][0]
    line = (f"ours reuse on: turn {args.turns} / turn 1 = {on[-1] / on[0]:.2f} (goal <= 1.3); "
            f"reuse off {off[-1] / off[0]:.2f}; turn {args.turns} on / off = "
            f"{on[-1] / off[-1]:.2f}")
    if PEER in results:
        peer = results[PEER][0]
        line += (f"; turn {args.turns}: ours on / llama.cpp = {on[-1] / peer[-1]:.2f} (goal <= "
                 f"1.0), llama.cpp turn {args.turns} / turn 1 = {peer[-1] / peer[0]:.2f}")
    print(line)
    print(json.dumps({"load": os.getloadavg()[0],
                      "ttft_s": {n: r[0] for n, r in results.items()},
                      "prompt": {n: r[1] for n, r in results.items()}}))


if __name__ == "__main__":
    main()
