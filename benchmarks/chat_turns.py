"""Time to first token as a chat grows (issue 44's chat goal: turn 10's at most 1.3x turn 1's,
and at most llama-cpp-python's at turn 10), ours beside llama-cpp-python's ``Llama`` on the
same model, in one run.

A random Llama-family model of one of ``llama_cpu.SHAPES`` (``--layers`` fewer layers for a
quick run) talks for ``--turns`` turns: each turn a user message of ``--user`` random token ids
joins the conversation, the engine answers ``--reply`` greedy tokens, and its answer joins it
too (ten turns of 150 + 48: a conversation of about 2,000 tokens). Ours: ``generate`` on the
``for_inference`` copy (what ``lm chat`` runs per turn: the whole conversation prefilled
again, until prefix reuse keeps its keys/values); llama.cpp: llama-cpp-python's ``Llama`` on
our ``lm export --to gguf`` float32 file, ``Llama.generate(tokens, reset=True)``, which
reuses the longest prefix of the tokens it evaluated before (its prefix reuse, on by
default), greedy (top_k 1). Time to first token: from the call to the first token's choice
(ours: ``generate``'s first ``on_step``; llama.cpp: the generator's first token).

    .venv/bin/python benchmarks/chat_turns.py [--shape smollm2-135m] [--layers N]
        [--turns 10] [--user 150] [--reply 48] [--threads 2]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from llama_cpu import SHAPES, tokenizer  # noqa: E402

from decoderkit.generation.lm.complete import generate  # noqa: E402
from decoderkit.generation.lm.rowwise import for_inference  # noqa: E402
from decoderkit.nn.lm.model import DecoderOnlyLM  # noqa: E402


def ours(model, messages: list[list[int]], reply: int) -> list[float]:
    """Each turn's time to first token, the conversation prefilled by ``generate``."""
    history: list[int] = []
    firsts = []
    for message in messages:
        history += message
        stamps: list[float] = []
        begin = time.perf_counter()
        out = generate(model, [history], max_new_tokens=reply, greedy=True,
                       on_step=lambda step, tokens, stamps=stamps:
                       stamps.append(time.perf_counter()))
        firsts.append(stamps[0] - begin)
        history += out[0]
    return firsts


def llamacpp(path: Path, messages: list[list[int]], reply: int, threads: int,
             context: int) -> list[float]:
    """Each turn's time to first token in llama-cpp-python's ``Llama`` (prefix reuse on)."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=context, n_threads=threads,
                n_threads_batch=threads, n_batch=512, verbose=False)
    history: list[int] = []
    firsts = []
    for message in messages:
        history += message
        begin = time.perf_counter()
        answer = []
        for token in llm.generate(history, top_k=1, temp=0.0, reset=True):
            if not answer:
                firsts.append(time.perf_counter() - begin)
            answer.append(token)
            if len(answer) == reply:
                break
        history += answer
    return firsts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="smollm2-135m")
    parser.add_argument("--layers", type=int, help="fewer layers than the shape's")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--user", type=int, default=150, help="tokens per user message")
    parser.add_argument("--reply", type=int, default=48, help="tokens per reply")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = SHAPES[args.shape]
    if args.layers:
        config = replace(config, n_layers=args.layers)
    context = args.turns * (args.user + args.reply) + 8
    if context > config.max_len:
        raise SystemExit(f"--turns x (--user + --reply) = {context} is past the context "
                         f"{config.max_len}")
    torch.manual_seed(0)
    model = DecoderOnlyLM(config).eval()
    gen = torch.Generator().manual_seed(1)
    messages = [torch.randint(config.vocab_size, (args.user,), generator=gen).tolist()
                for _ in range(args.turns)]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            print("llama-cpp-python: not installed")
        else:
            from decoderkit.interop.gguf.export import export_gguf

            export_gguf(model, tokenizer(config.vocab_size), Path(tmp) / "gguf")
            results["llama.cpp f32"] = llamacpp(Path(tmp) / "gguf" / "model.gguf", messages,
                                                args.reply, args.threads, context)
    results["ours float32"] = ours(for_inference(model), messages, args.reply)
    print(f"{args.shape} shape ({config.n_layers} layers, width {config.d_model}), {args.turns} "
          f"turns of {args.user} + {args.reply} tokens, greedy, {args.threads} threads, torch "
          f"{torch.__version__}, load average {os.getloadavg()[0]:.1f}")
    names = list(results)
    print(f"  {'turn':>4} {'prompt':>6} " + " ".join(f"{n + ' TTFT ms':>22}" for n in names))
    for t in range(args.turns):
        prompt = (t + 1) * args.user + t * args.reply
        print(f"  {t + 1:>4} {prompt:>6} "
              + " ".join(f"{results[n][t] * 1e3:22.0f}" for n in names))
    mine = results["ours float32"]
    print(f"ours: turn {args.turns} / turn 1 = {mine[-1] / mine[0]:.2f} (goal <= 1.3)"
          + (f"; turn {args.turns}: ours / llama.cpp = {mine[-1] / results[names[0]][-1]:.2f} "
             f"(goal <= 1.0)" if len(names) > 1 else ""))
    print(json.dumps({"load": os.getloadavg()[0], "ttft_s": results}))


if __name__ == "__main__":
    main()
