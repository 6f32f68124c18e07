"""The server's prefix-reuse goal (issue 44: 16 clients sharing a system prompt, time to first
token p50 at most 0.5x and throughput at least 1.5x the same server with reuse off), both
servers in one run.

A random Llama-family model of one of ``llama_cpu.SHAPES`` (``--layers`` fewer layers for a
quick run), written with ``lm_serve``'s synthetic vocabulary and ChatML template
(``lm_serve.chat_directory``), is served by ``decoderkit serve`` on 127.0.0.1 twice: with its
prefix store (the default) and with ``--no-prefix-reuse``. Each server first answers one
request with the system prompt (a chat service's steady state: the system prompt has been
seen; reuse off gains nothing from it but its warm-up), then ``--rounds`` rounds of
``--clients`` clients at once, each streaming ``/v1/chat/completions`` with the shared system
message of ``--system`` one-token words and a user message of its own (``--user`` words,
every request's different), ``--new-tokens`` tokens each (every end id banned). The work is
bounded by requests (rounds x clients), not by time. Printed for both: time to first token
p50 and p90 over every request, throughput (tokens generated over the rounds' wall time), the
store's hits and reused positions (``/metrics``), and the ratios on / off.

    .venv/bin/python benchmarks/serve_prefix.py [--shape smollm2-135m] [--layers N]
        [--clients 16] [--system 1000] [--user 32] [--new-tokens 32] [--rounds 2]
        [--threads 2]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import httpx  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from llama_cpu import SHAPES  # noqa: E402
from lm_serve import Load, chat_directory, clients, one_token_words, start_server, stream  # noqa: E402

ROUTE = "/v1/chat/completions"
METRICS = ("decoderkit_prefix_cache_hits_total", "decoderkit_prefix_cache_reused_tokens_total")


def loads(args, tokenizer, chat) -> tuple[Load, list[Load]]:
    """(the warm-up's load: one request with the system prompt, each round's load: a request
    per client, the system prompt shared, the user messages all different)."""
    words, draw = one_token_words(tokenizer), random.Random(1)
    system = {"role": "system", "content": "".join(" " + w for w in draw.sample(words,
                                                                               args.system))}
    ban = {str(i): -100 for i in sorted(tokenizer.end_ids | chat.end_ids(tokenizer))}

    def load(count: int) -> Load:
        messages = [[system, {"role": "user", "content": "".join(
            " " + w for w in draw.sample(words, args.user))}] for _ in range(count)]
        return Load(ROUTE, [{"messages": m, "logit_bias": ban} for m in messages],
                    [chat.encode(tokenizer, m) for m in messages])

    return load(1), [load(args.clients) for _ in range(args.rounds)]


def metrics(url: str) -> dict[str, float]:
    """The prefix store's counters from ``/metrics`` (0 where the server has no store)."""
    found = dict.fromkeys(METRICS, 0.0)
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        name, _, value = line.partition(" ")
        if name in found:
            found[name] = float(value)
    return found


def serve(directory: Path, args, warm: Load, rounds: list[Load],
          flags: tuple[str, ...]) -> dict:
    """One server's run: every request's time to first token, the rounds' throughput
    (tokens/s) and its prefix counters."""
    proc, url = start_server(directory, args.threads, args.clients, flags)
    try:
        stream(url, warm, 0, 4)
        firsts, wall = [], 0.0
        for load in rounds:
            seconds, times = clients(url, load, args.new_tokens, [0.0] * args.clients)
            wall += seconds
            firsts += [t[0] for t in times]
        counts = metrics(url)
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    cut = statistics.quantiles(firsts, n=10)
    return {"p50": statistics.median(firsts), "p90": cut[-1], "firsts": firsts,
            "rate": len(firsts) * args.new_tokens / wall, "hits": counts[METRICS[0]],
            "reused": counts[METRICS[1]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="smollm2-135m")
    parser.add_argument("--layers", type=int, help="fewer layers than the shape's")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--system", type=int, default=1000, help="system prompt's words "
                        "(a token each)")
    parser.add_argument("--user", type=int, default=32, help="each user message's words")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of --clients at once")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for name in ("clients", "system", "user", "new_tokens", "rounds", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got "
                         f"{getattr(args, name)}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="serve-prefix-") as tmp:
        directory = Path(tmp) / "hf"
        tokenizer, chat = chat_directory(args.shape, args.layers, directory)
        warm, rounds = loads(args, tokenizer, chat)
        config = json.loads((directory / "config.json").read_text())
        print(f"{args.shape} shape ({config['num_hidden_layers']} layers), {args.clients} "
              f"clients x {args.rounds} rounds, prompts {len(rounds[0].prompts[0])} tokens "
              f"(system {args.system} words, user {args.user}), {args.new_tokens} new tokens, "
              f"{args.threads} threads, torch {torch.__version__}, load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        runs = {}
        for name, flags in (("reuse on", ()), ("reuse off", ("--no-prefix-reuse",))):
            runs[name] = r = serve(directory, args, warm, rounds, flags)
            print(f"  {name:>9}: TTFT p50 {r['p50'] * 1e3:.0f} ms, p90 {r['p90'] * 1e3:.0f} ms, "
                  f"{r['rate']:.1f} tokens/s; prefix hits {r['hits']:.0f}, positions reused "
                  f"{r['reused']:.0f}", flush=True)
    on, off = runs["reuse on"], runs["reuse off"]
    print(f"on / off: TTFT p50 {on['p50'] / off['p50']:.2f}x (goal <= 0.5), p90 "
          f"{on['p90'] / off['p90']:.2f}x, throughput {on['rate'] / off['rate']:.2f}x (goal >= "
          f"1.5); load average at the end {os.getloadavg()[0]:.1f}")
    print(json.dumps({"load": os.getloadavg()[0], "runs": runs}))


if __name__ == "__main__":
    main()
