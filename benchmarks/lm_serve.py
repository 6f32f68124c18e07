"""The LM server's four goals (issue 24), measured in one run as ratios.

A random GPT-2-small-shaped model (``--layers``/``--width`` shrink it for a quick run) is saved
as a Hugging Face directory with a synthetic vocabulary (``lm_generate.ctranslate2_int8``'s:
token i is "t<i>"), served by ``decoderkit serve --checkpoint`` in a subprocess (float32,
rowwise kernels, ``--threads``) and driven over HTTP by streaming clients sending token-id
prompts to ``/v1/completions`` (``--prompt`` tokens, ``--new-tokens`` new, end-of-text banned
by ``logit_bias`` so every request makes exactly that many).

``--shape smollm2-135m`` (or another of ``llama_cpu.SHAPES``; issue 36's chat goal) serves a
random Llama-family model instead, written by ``lm export``'s ``export_llama`` with a
synthetic byte-level BPE of the model's whole vocabulary (learned from random words; its last
ids ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, the EOS) and SmolLM2's ChatML
template (``chat_template.jinja``); the clients stream ``/v1/chat/completions`` with one user
message of random one-token words, as many as make the rendered prompt ``--prompt`` tokens
(the template's default system prompt among them), every end id banned. Printed:

1. C concurrent clients: total tokens/s over one client's (goal >= 6x), and over CTranslate2's
   ``generate_batch`` (no HTTP) of the same C prompts at once on the converted model, float32,
   run in a child process without this script's ``OMP_WAIT_POLICY=PASSIVE``, its best (goal
   >= 1.0x);
2. a lone client's time to first token and mean time between tokens over ``lm sample``'s
   in-process (``generate`` on the same rowwise model, timed by its ``on_step``; goal <=
   1.10x each; the clients share one connection pool, as the openai package's do), each the
   mean of ``ROUNDS`` runs, the two alternating;
3. C clients arriving at uniformly random times over ``--spread`` seconds: the median time
   between tokens over the lone client's (both rounds' gaps; goal <= 2x);
4. the server's resident memory while C requests run, over weights + C caches + 300 MB
   (goal <= 1.0).

    .venv/bin/python benchmarks/lm_serve.py [--shape gpt2] [--clients 16] [--new-tokens 128]
        [--prompt 64] [--threads 2] [--spread 10] [--layers N] [--width 768]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import string  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402

import httpx  # noqa: E402
import torch  # noqa: E402

from decoderkit.base.files import write_atomic  # noqa: E402
from decoderkit.generation.lm.complete import generate  # noqa: E402
from decoderkit.generation.lm.rowwise import for_inference  # noqa: E402
from decoderkit.interop.checkpoints import load_checkpoint  # noqa: E402
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig  # noqa: E402
from decoderkit.text.lm.chat import ChatTemplate  # noqa: E402
from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer, Specials  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from llama_cpu import SHAPES  # noqa: E402
from lm_generate import ctranslate2_int8  # noqa: E402

MB = 1 << 20
ROUNDS = 2  # lone-client and lm-sample runs, alternated
GPT2 = "gpt2"  # --shape's default: the completions API on a GPT-2; the others chat on a Llama
# SmolLM2-Instruct's chat template (ChatML, a default system prompt), and the synthetic
# vocabulary's special tokens (its last ids) named as SmolLM2-Instruct's (CTranslate2's
# converter needs a BOS)
CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by "
          "Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIAL = (END_OF_TEXT, "<|im_start|>", "<|im_end|>")
NAMED = Specials(bos="<|im_start|>", eos="<|im_end|>", unk=END_OF_TEXT)
# CTranslate2's generate_batch, run in a child process without the OMP_WAIT_POLICY=PASSIVE this
# script sets: its OpenMP threads then wait spinning, its best (1.15-1.2x faster at 16 prompts;
# benchmarks/README.md). argv: model directory, threads, new tokens; stdin: the prompts (JSON
# ids; its vocabulary.json names them).
PEER = """
import json, sys, time
import ctranslate2
directory, threads, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(directory + "/vocabulary.json") as f:
    vocabulary = json.load(f)
tokens = [[vocabulary[i] for i in p] for p in json.loads(sys.stdin.read())]
g = ctranslate2.Generator(directory, device="cpu", compute_type="float32", intra_threads=threads)
run = dict(include_prompt_in_result=False, sampling_topk=0)
g.generate_batch(tokens[:2], max_length=4, min_length=4, **run)  # warm-up
begin = time.perf_counter()
g.generate_batch(tokens, max_length=new, min_length=new, **run)
print(len(tokens) * new / (time.perf_counter() - begin))
"""


# One client for every request, as the openai package keeps one: its connections are reused,
# and making one (an SSL context, certifi's bundle: 60-80 ms here, more under load) is not
# counted in a request's time to first token.
CLIENT = httpx.Client(timeout=3600, limits=httpx.Limits(max_connections=64))


@dataclass(frozen=True)
class Load:
    """What the clients send: the route, each client's body (its prompt or messages, and the
    end ids banned by ``logit_bias``), and each prompt's ids (``lm sample``'s, CTranslate2's)."""

    route: str
    bodies: list[dict]
    prompts: list[list[int]]


def stream(url: str, load: Load, i: int, new: int, start: float = 0.0) -> list[float]:
    """Client i's streaming request after ``start`` seconds; the times its tokens arrived,
    counted from when it was sent (a chunk per token; a chat's first, its role, is none)."""
    time.sleep(start)
    body = load.bodies[i] | {"max_tokens": new, "temperature": 1.0, "seed": 0, "stream": True}
    sent, times = time.perf_counter(), []
    with CLIENT.stream("POST", url + load.route, json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{load.route}: {r.status_code} {r.read().decode()[:300]}")
        for line in r.iter_lines():
            if line.startswith("data: {") and '"finish_reason"' in line \
                    and '"delta": {"role"' not in line:
                times.append(time.perf_counter() - sent)
    assert len(times) == new, f"{len(times)} tokens, not {new}"
    return times


def clients(url: str, load: Load, new: int,
            starts: list[float]) -> tuple[float, list[list[float]]]:
    """Every client of ``load`` at once, streaming; (wall seconds, each one's token times)."""
    out: list[list[float]] = [[] for _ in load.bodies]

    def run(i: int) -> None:
        out[i] = stream(url, load, i, new, starts[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(load.bodies))]
    begin = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - begin, out


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def in_process(model, prompt: list[int], new: int) -> tuple[float, float]:
    """``lm sample``'s loop: (time to first token, mean time between tokens)."""
    stamps: list[float] = []
    begin = time.perf_counter()
    generate(model, [prompt], max_new_tokens=new, seed=0,
             on_step=lambda step, tokens: stamps.append(time.perf_counter() - begin))
    return stamps[0], statistics.mean(gaps(stamps))


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """The process's resident memory (or another /proc status ``field``: RssFile, the shared
    libraries' pages among it), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field}")


def start_server(directory: Path, threads: int, clients_: int,
                 flags: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """``decoderkit serve`` of ``directory`` on a free port of 127.0.0.1 (``flags`` added to
    its command line); (the process, its URL) once ``/health`` answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "decoderkit", "serve", "--checkpoint",
                             str(directory), "--port", str(port), "--threads", str(threads),
                             "--max-batch", str(max(clients_, 1)), "--log-level", "warning",
                             "--max-work-tokens", str(1 << 20), *flags])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.2)


def gpt2_load(args, d: Path) -> tuple[Load, Path | None]:
    """A random GPT-2 of ``--layers`` x ``--width`` in ``d / "hf"`` with the synthetic
    vocabulary, its CTranslate2 float32 conversion in ``d / "ct2"`` (None without the
    package); random token-id prompts to the completions API."""
    from transformers import GPT2Config, GPT2LMHeadModel

    layers, width = args.layers or 12, args.width or 768
    hf = GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=width, n_head=max(1, width // 64),
                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()
    converted = ctranslate2_int8(hf, d, args.threads, quantization="float32")
    del converted  # timed in a child process (PEER)
    V = hf.config.vocab_size
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(V - 1, (args.clients, args.prompt), generator=g).tolist()
    ban = {str(V - 1): -100}  # <|endoftext|>
    return (Load("/v1/completions", [{"prompt": p, "logit_bias": ban} for p in prompts],
                 prompts), d / "ct2" if (d / "ct2").is_dir() else None)


def chat_tokenizer(vocab_size: int) -> LMTokenizer:
    """A byte-level BPE of exactly ``vocab_size`` ids: learned from random lowercase words,
    then ``SPECIAL`` (named ``NAMED``)."""
    draw = random.Random(0)
    texts = [" ".join("".join(draw.choices(string.ascii_lowercase, k=draw.randint(1, 8)))
                      for _ in range(1000)) for _ in range(300)]
    hf = LMTokenizer.train_bpe(texts, vocab_size - len(SPECIAL)).hf
    hf.add_special_tokens(list(SPECIAL))
    if hf.get_vocab_size() != vocab_size:
        raise RuntimeError(f"the synthetic BPE has {hf.get_vocab_size()} ids, not {vocab_size}")
    return LMTokenizer(hf, NAMED)


def one_token_words(tokenizer: LMTokenizer) -> list[str]:
    """The words (letters) of ``tokenizer`` that are one token each after a space (``Ġ`` +
    letters), sorted."""
    alone = sorted(t[1:] for t in tokenizer.hf.get_vocab() if t[:1] == "Ġ" and t[1:].isalpha())
    found = tokenizer.hf.encode_batch([" " + w for w in alone], add_special_tokens=False)
    return [w for w, e in zip(alone, found, strict=True) if len(e.ids) == 1]


def chat_messages(chat, tokenizer: LMTokenizer, count: int, length: int) -> list[list[dict]]:
    """``count`` conversations of one user message whose rendered prompt is ``length``
    tokens: random words that are one token each after a space (``Ġ`` + letters)."""
    words = one_token_words(tokenizer)
    own = len(chat.encode(tokenizer, [{"role": "user", "content": ""}]))
    if length <= own:
        raise SystemExit(f"--prompt must be more than the chat template's own {own} tokens, "
                         f"got {length}")
    draw, out = random.Random(1), []
    for _ in range(count):
        messages = [{"role": "user",
                     "content": "".join(" " + w for w in draw.sample(words, length - own))}]
        if len(chat.encode(tokenizer, messages)) != length:
            raise RuntimeError(f"a chat prompt is not {length} tokens: {messages}")
        out.append(messages)
    return out


def chat_directory(shape: str, layers: int | None, d: Path) -> tuple[LMTokenizer, ChatTemplate]:
    """A random Llama of ``shape`` (``layers`` of it; None: all) in ``d`` as ``lm export``
    writes one, with ``chat_tokenizer``'s vocabulary and the ChatML template; (its tokenizer,
    its template)."""
    from decoderkit.interop.llama.hf_export import export_llama
    from decoderkit.text.lm.chat import TEMPLATE_FILE

    config = SHAPES[shape]
    if layers:
        config = replace(config, n_layers=layers)
    tokenizer = chat_tokenizer(config.vocab_size)
    export_llama(DecoderOnlyLM(config).eval(), tokenizer, d)
    write_atomic(d / TEMPLATE_FILE, lambda tmp: tmp.write_text(CHATML))
    return tokenizer, ChatTemplate.find(d)


def chat_load(args, d: Path) -> tuple[Load, Path | None]:
    """A random Llama of ``--shape`` (``--layers`` of it) in ``d / "hf"`` as ``lm export``
    writes one, with the ChatML template; its CTranslate2 float32 conversion in ``d / "ct2"``
    (None without the package); chat requests of ``--prompt`` tokens, every end id banned."""
    tokenizer, chat = chat_directory(args.shape, args.layers, d / "hf")
    messages = chat_messages(chat, tokenizer, args.clients, args.prompt)
    ban = {str(i): -100 for i in sorted(tokenizer.end_ids | chat.end_ids(tokenizer))}
    load = Load("/v1/chat/completions", [{"messages": m, "logit_bias": ban} for m in messages],
                [chat.encode(tokenizer, m) for m in messages])
    try:
        from ctranslate2.converters import TransformersConverter
    except ImportError:
        return load, None
    TransformersConverter(str(d / "hf")).convert(str(d / "ct2"), quantization="float32")
    return load, d / "ct2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=[GPT2, *SHAPES], default=GPT2,
                        help="gpt2: the completions API; a Llama shape: streaming chat")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--spread", type=float, default=10.0)
    parser.add_argument("--layers", type=int, help="fewer layers than the shape's (gpt2: 12)")
    parser.add_argument("--width", type=int, help="GPT-2's width (768; a Llama shape has its own)")
    args = parser.parse_args()
    if args.width is not None and args.shape != GPT2:
        parser.error(f"--width: only with --shape {GPT2} (a Llama shape has its own), got "
                     f"--shape {args.shape}")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="lmserve-bench-") as tmp:
        load, ct2 = (gpt2_load if args.shape == GPT2 else chat_load)(args, Path(tmp))
        model = load_checkpoint(Path(tmp) / "hf").model
        ours = for_inference(model)  # what lm sample and the server run
        proc, url = start_server(Path(tmp) / "hf", args.threads, args.clients)
        try:
            report(args, url, proc.pid, ours, ct2, load, model.config)
        finally:
            proc.terminate()
            proc.wait(timeout=120)


def report(args, url: str, pid: int, ours, ct2: Path | None, load: Load,
           config: LMConfig) -> None:
    c, prompts = config, load.prompts
    C, N, P = args.clients, args.new_tokens, len(prompts[0])
    print(f"{args.shape} shape ({c.n_layers} layers, width {c.d_model}, {c.n_heads}/"
          f"{c.kv_heads} heads, FFN {c.d_ff}, vocabulary {c.vocab_size}), {load.route}, prompt "
          f"{P}, {N} new tokens, {C} clients, {args.threads} threads, torch {torch.__version__}"
          f", load average {os.getloadavg()[0]:.1f}", flush=True)
    stream(url, load, 0, 4)  # warm-up
    in_process(ours, prompts[0], 4)
    lones, samples = [], []
    for _ in range(ROUNDS):  # alternating: the machine's drift falls on both sides alike
        lones.append(stream(url, load, 0, N))
        samples.append(in_process(ours, prompts[0], N))
    lone_rate = ROUNDS * N / sum(times[-1] for times in lones)
    lone_gaps = [g for times in lones for g in gaps(times)]
    first, between = statistics.mean(t[0] for t in lones), statistics.mean(lone_gaps)
    ttft, tbt = (statistics.mean(s[i] for s in samples) for i in (0, 1))
    print(f"2. lone client ({ROUNDS} rounds, alternating with lm sample): first token "
          f"{first * 1e3:.0f} ms vs lm sample {ttft * 1e3:.0f} ms ({first / ttft:.2f}x, goal <= "
          f"1.10x); between tokens {between * 1e3:.1f} ms vs {tbt * 1e3:.1f} ms "
          f"({between / tbt:.2f}x, goal <= 1.10x); by round: "
          + ", ".join(f"{statistics.mean(gaps(t)) * 1e3:.1f} / {s[1] * 1e3:.1f} ms"
                      for t, s in zip(lones, samples, strict=True)), flush=True)
    peak, files = [0.0], [0.0]
    done = threading.Event()

    def sample_rss() -> None:
        while not done.wait(0.05):  # a short run (--layers 2) lasts a fraction of a second
            rss = rss_mb(pid)
            if rss > peak[0]:
                peak[0], files[0] = rss, rss_mb(pid, "RssFile")

    watcher = threading.Thread(target=sample_rss)
    watcher.start()
    wall, _ = clients(url, load, N, [0.0] * C)
    done.set()
    watcher.join()
    rate = C * N / wall
    line = f"1. {C} clients: {rate:.1f} tokens/s vs one client {lone_rate:.1f} " \
           f"({rate / lone_rate:.2f}x, goal >= 6x)"
    if ct2 is not None:
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        ran = subprocess.run([sys.executable, "-c", PEER, str(ct2), str(args.threads), str(N)],
                             env=env, input=json.dumps(prompts), capture_output=True, text=True)
        if ran.returncode != 0:
            raise RuntimeError(f"CTranslate2 failed: {ran.stderr.strip()[-300:]}")
        peer = float(ran.stdout)
        line += f"; CTranslate2 float32 generate_batch {peer:.1f} ({rate / peer:.2f}x, goal " \
                f">= 1.0x)"
    print(line, flush=True)
    draw = random.Random(0)  # one generator: a fresh Random(0) per client gave all one time
    starts = sorted(draw.uniform(0, args.spread) for _ in range(C))
    _, spread = clients(url, load, N, starts)
    median = statistics.median(g for times in spread for g in gaps(times))
    print(f"3. {C} clients over {args.spread:.0f} s: median between tokens {median * 1e3:.1f} "
          f"ms vs lone {statistics.median(lone_gaps) * 1e3:.1f} ms "
          f"({median / statistics.median(lone_gaps):.2f}x, goal <= 2x)", flush=True)
    weights = sum(p.numel() * p.element_size() for p in ours.parameters()) / MB
    weights += sum(b.numel() * b.element_size() for b in ours.buffers()) / MB
    cache = C * 2 * c.n_layers * (P + N) * c.kv_heads * c.d_head * 4 / MB  # keys, values
    print(f"4. resident memory with {C} running: {peak[0]:.0f} MB vs weights {weights:.0f} + "
          f"caches {cache:.0f} + 300 MB ({peak[0] / (weights + cache + 300):.2f}, goal <= 1.0; "
          f"{files[0]:.0f} MB of it the libraries' file pages)")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
