"""Race llama.cpp on the CPU (issue 36 part 5): a random Llama-family model, ours beside the
engines a CPU user would pick instead, batch 1 and 8, ratios in one run.

Shapes: ``smollm2-135m`` (the default: 30 layers, width 576, 9 heads, 3 key/value heads, FFN
1,536, vocabulary 49,152, tied head, RoPE base 100,000), ``qwen2.5-0.5b`` (24 x 896, 14
heads, 2 key/value heads, FFN 4,864, vocabulary 151,936, tied, q/k/v biases, base 1,000,000)
and ``llama3.2-1b`` (16 x 2,048, 32 heads, 8 key/value heads, FFN 8,192, vocabulary 128,256,
tied, base 500,000; widths divide by 256, so llama.cpp's K-quants apply to every matrix).
Random float32 weights built here once, then written for each engine, which loads its own copy
in its own process (so its resident memory is its own):

- ours float32 and ours int8: ``generation.lm.complete.generate`` on ``for_inference(model,
  int8)``, what ``decoderkit lm sample [--int8]`` runs; with ``--compile``, ours float32 is
  ``lm sample --compile --autotune``'s compiled step (its first calls compile: not timed);
- ours bfloat16 and ours int8/bf16: ``for_inference(model, int8, dtype=torch.bfloat16)``
  (``lm sample --dtype bfloat16 [--int8]``: bfloat16 weights, or int8 weights through
  PyTorch's weight-only kernel with bfloat16 activations), compiled with ``--compile``;
- Hugging Face ``generate`` (``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` from our ``lm export
  --to transformers`` directory), its cache, greedy, exactly N tokens (``min_new_tokens``);
- llama.cpp f32 and q8_0: llama-cpp-python on our ``lm export --to gguf`` file, its low-level
  batch API (``llama_decode`` with one sequence id per row: batch 8 is 8 parallel sequences in
  one context, every step one 8-token batch), greedy by argmax of its logits; its key/value
  cache at its default (float16); both shapes as llama.cpp's own architecture (``llama``;
  ``qwen2``, with its q/k/v biases). "not installed" without llama-cpp-python; Q4_K_M is
  llama.cpp's own quantizer (``llama_model_quantize``) on the float32 file;
- CTranslate2 int8: ``ct2-transformers-converter``'s ``TransformersConverter`` on the same
  export directory, ``Generator.generate_batch``, greedy (``sampling_topk=1``), exactly N
  tokens.

Each engine runs B=1 and B=8 (the same 8 random prompts of P tokens, B=1 the first), greedy,
``--repeats`` times, the best kept. Printed per engine and batch: tokens/s (B x N over the
whole call, prefill included), time to first token (a call making 1 token: prefill + one
step), resident memory after the runs (VmRSS of its process, MiB), and ours / it for each
(tokens/s: above 1 ours is faster; best/it: the fastest of ours' engines at that batch; TTFT
and memory: it / ours float32, above 1 ours is smaller). The
bandwidth floor: the float32 weights' bytes (every tensor a decode step reads; the tied
embedding once) over this machine's read bandwidth, measured in the same run as the best
``torch.sum`` over a float32 tensor of the weights' size with the same threads; ours B=1
float32's decode rate ((N - 1) / (T_N - T_1)) is printed as a fraction of the floor's rate.

    .venv/bin/python benchmarks/llama_cpu.py [--shape smollm2-135m] [--new-tokens 128]
        [--prompt 64] [--batch 1 8] [--threads 2] [--repeats 2] [--layers N]
        [--engines ours int8 bf16 bf16-int8 hf llamacpp-f32 llamacpp-q8 llamacpp-q4km
        ct2-int8] [--compile]

Legend: B batch, P prompt length, N new tokens, TTFT time to first token.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig  # noqa: E402
from decoderkit.nn.lm.presets import PUBLISHED_SHAPES, lm_preset  # noqa: E402
from lm_generate import best_seconds  # noqa: E402  (beside this file)

ENGINES = ("ours", "int8", "bf16", "bf16-int8", "hf", "llamacpp-f32", "llamacpp-q8",
           "llamacpp-q4km", "ct2-int8")
LABELS = {"ours": "ours float32", "int8": "ours int8", "bf16": "ours bfloat16",
          "bf16-int8": "ours int8/bf16", "hf": "HF generate f32", "llamacpp-f32": "llama.cpp f32",
          "llamacpp-q8": "llama.cpp q8_0", "llamacpp-q4km": "llama.cpp Q4_K_M",
          "ct2-int8": "CTranslate2 int8"}
OURS = {"ours": (False, "float32"), "int8": (True, "float32"), "bf16": (False, "bfloat16"),
        "bf16-int8": (True, "bfloat16")}  # engine -> (int8, dtype) of for_inference
# the published shapes (nn.lm.presets.PUBLISHED_SHAPES), each at a 2,048-position context here
SHAPES = {name: replace(lm_preset(name), max_len=2048) for name in PUBLISHED_SHAPES}


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident memory (or another /proc status ``field``), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field}")


# ---- the engines, each in its own process: run(rows, new) makes exactly `new` greedy tokens


def ours_engine(d: Path, int8: bool, compile: bool = False, dtype: str = "float32"):
    from decoderkit.generation.lm.complete import generate
    from decoderkit.generation.lm.rowwise import for_inference

    config = LMConfig.from_dict(json.loads((d / "config.json").read_text()))
    model = DecoderOnlyLM(config).eval()
    model.load_state_dict(torch.load(d / "model.pt", mmap=True, weights_only=True))
    bf16 = dtype == "bfloat16"  # the fbgemm int8 copy is refused compiled: it ran slower
    compile = compile and (bf16 or not int8)
    model = for_inference(model, int8, compile=compile, autotune=compile,
                          dtype=getattr(torch, dtype))
    return lambda rows, new: generate(model, rows, max_new_tokens=new, greedy=True)


def hf_engine(d: Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(d / "hf", torch_dtype=torch.float32).eval()

    def run(rows, new):
        ids = torch.tensor(rows)
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                           min_new_tokens=new, do_sample=False, pad_token_id=0)
    return run


def llamacpp_engine(d: Path, kind: str, threads: int, batch: int, context: int):
    import ctypes

    import llama_cpp
    import numpy as np
    from llama_cpp import _internals

    params = llama_cpp.llama_model_default_params()
    model = _internals.LlamaModel(path_model=str(d / f"gguf-{kind}" / "model.gguf"),
                                  params=params, verbose=False)
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = batch * context, batch * context, batch * context
    cp.n_seq_max, cp.n_threads, cp.n_threads_batch = batch, threads, threads
    ctx = _internals.LlamaContext(model=model, params=cp, verbose=False)
    vocab = model.n_vocab()
    lot = _internals.LlamaBatch(n_tokens=batch * context, embd=0, n_seq_max=batch,
                                verbose=False)

    def argmax(i: int) -> int:
        ptr = ctx.get_logits_ith(i)
        return int(np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)),
                                         shape=(vocab,)).argmax())

    def run(rows, new):
        ctx.kv_cache_clear()
        lot.reset()
        for s, row in enumerate(rows):
            lot.add_sequence(row, s, False)
        ctx.decode(lot)
        ends = [sum(len(r) for r in rows[:s + 1]) - 1 for s in range(len(rows))]
        tokens = [argmax(i) for i in ends]
        positions = [len(r) for r in rows]
        b = lot.batch
        for _ in range(new - 1):
            b.n_tokens = len(rows)
            for s, token in enumerate(tokens):
                b.token[s], b.pos[s] = token, positions[s]
                b.seq_id[s][0], b.n_seq_id[s], b.logits[s] = s, 1, True
                positions[s] += 1
            ctx.decode(lot)
            tokens = [argmax(s) for s in range(len(rows))]
    run.keep = (model, ctx, lot)  # alive as long as run
    return run


def ct2_engine(d: Path, threads: int):
    import ctranslate2

    generator = ctranslate2.Generator(str(d / "ct2"), device="cpu", compute_type="int8",
                                      intra_threads=threads)
    vocabulary = json.loads((d / "ct2" / "vocabulary.json").read_text())

    def run(rows, new):
        generator.generate_batch([[vocabulary[i] for i in r] for r in rows], max_length=new,
                                 min_length=new, include_prompt_in_result=False,
                                 sampling_topk=1)
    return run


def child(args: argparse.Namespace) -> None:
    """One engine's figures (its own process), printed as one JSON line."""
    torch.set_num_threads(args.threads)
    d = Path(args.dir)
    prompts = json.loads((d / "prompts.json").read_text())
    context = len(prompts[0]) + args.new_tokens + 1
    name, out = args.child, {}
    start = time.perf_counter()
    if name in OURS:
        engines = dict.fromkeys(args.batch, ours_engine(d, *OURS[name][:1], args.compile,
                                                        OURS[name][1]))
    elif name == "hf":
        engines = dict.fromkeys(args.batch, hf_engine(d))
    elif name == "ct2-int8":
        engines = dict.fromkeys(args.batch, ct2_engine(d, args.threads))
    else:  # one context per batch size (its sequences)
        kind = name.removeprefix("llamacpp-")
        engines = {b: llamacpp_engine(d, kind, args.threads, b, context) for b in args.batch}
    out["load_s"] = time.perf_counter() - start
    for b, run in engines.items():
        rows = prompts[:b]
        start = time.perf_counter()
        run(rows, 2)  # warm-up (with --compile: compiles the step for this batch)
        out[f"warm_s_{b}"] = time.perf_counter() - start
        first = best_seconds(lambda run=run, rows=rows: run(rows, 1), args.repeats)
        whole = best_seconds(lambda run=run, rows=rows: run(rows, args.new_tokens), args.repeats)
        out[str(b)] = {"first_s": first, "whole_s": whole}
    out["rss_mb"], out["hwm_mb"] = rss_mb(), rss_mb("VmHWM")
    print(json.dumps(out))


# ---- the parent: the model, its copies for every engine, the children, the table


def bandwidth_gbs(nbytes: int, repeats: int = 5) -> float:
    """Read bandwidth: the best ``torch.sum`` over a float32 tensor of ``nbytes`` bytes."""
    t = torch.rand(nbytes // 4)
    t.sum()
    return nbytes / best_seconds(t.sum, repeats) / 1e9


def weight_bytes(model: DecoderOnlyLM) -> int:
    """The bytes of every distinct parameter (a tied head counted once)."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())


def tokenizer(vocab_size: int):
    """A byte-level BPE of 300 tokens with <|endoftext|> (the exports need a tokenizer; the
    engines read ids, and the GGUF and CT2 vocabularies are padded to the model's rows)."""
    from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer

    text = ["the quick brown fox jumps over the lazy dog", "pack my box with five dozen jugs",
            "how vexingly quick daft zebras jump", "sphinx of black quartz, judge my vow"] * 20
    tok = LMTokenizer.train_bpe(text, 299)
    tok.hf.add_special_tokens([END_OF_TEXT])
    return tok


def prepare(model: DecoderOnlyLM, d: Path, prompts: list[list[int]], wanted: list[str],
            threads: int) -> dict[str, str]:
    """Every engine's copy in ``d``; returns engine -> why it cannot run (those that cannot)."""
    (d / "config.json").write_text(json.dumps(model.config.to_dict()))
    torch.save(model.state_dict(), d / "model.pt")
    (d / "prompts.json").write_text(json.dumps(prompts))
    skipped: dict[str, str] = {}
    tok = tokenizer(model.config.vocab_size)
    if {"hf", "ct2-int8"} & set(wanted):
        from decoderkit.interop.llama.hf_export import export_llama

        export_llama(model, tok, d / "hf")
    if "ct2-int8" in wanted:
        try:
            from ctranslate2.converters import TransformersConverter
        except ImportError:
            skipped["ct2-int8"] = "not installed"
        else:
            TransformersConverter(str(d / "hf")).convert(str(d / "ct2"), quantization="int8")
            vocab = json.loads((d / "ct2" / "vocabulary.json").read_text())
            if len(vocab) != model.config.vocab_size:  # padded as GGUF's are
                vocab += [f"[PAD{i}]" for i in range(len(vocab), model.config.vocab_size)]
                (d / "ct2" / "vocabulary.json").write_text(json.dumps(vocab))
    for name, kind in (("llamacpp-f32", "float32"), ("llamacpp-q8", "q8_0")):
        if name not in wanted and not (name == "llamacpp-f32" and "llamacpp-q4km" in wanted):
            continue  # (Q4_K_M is quantized from the float32 file)
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            skipped[name] = "not installed"
            continue
        from decoderkit.interop.gguf.export import export_gguf

        export_gguf(model, tok, d / f"gguf-{name.removeprefix('llamacpp-')}", kind=kind)
    if "llamacpp-q4km" in wanted and "llamacpp-f32" not in skipped:
        q4km(d / "gguf-f32" / "model.gguf", d / "gguf-q4km" / "model.gguf", threads)
    return skipped


def q4km(source: Path, out: Path, threads: int) -> None:
    """llama.cpp's own quantizer (``llama_model_quantize``, as its llama-quantize tool) from
    the float32 GGUF to Q4_K_M (4-bit K-quants; the widths must divide by 256)."""
    import llama_cpp

    out.parent.mkdir()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M, threads
    if llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params) != 0:
        raise RuntimeError(f"llama_model_quantize failed on {source}")


def profile(model: DecoderOnlyLM, prompt: int, steps: int = 8, top: int = 8) -> None:
    """Top ops by self CPU time of one decode step (B=1): the profiler runs from the first
    token's choice (after the prefill) to the choice of token 1 + ``steps``, over ``steps``."""
    from torch.profiler import ProfilerActivity, profile as profiler

    from decoderkit.generation.lm.complete import generate
    from decoderkit.generation.lm.rowwise import for_inference

    rows = torch.randint(model.config.vocab_size, (1, prompt),
                         generator=torch.Generator().manual_seed(1)).tolist()
    for label, int8 in (("ours float32", False), ("ours int8", True)):
        m = for_inference(model, int8)
        generate(m, rows, max_new_tokens=4, greedy=True)  # warm-up
        prof = profiler(activities=[ProfilerActivity.CPU])

        def on_step(step, tokens, prof=prof):
            if step == 0:
                prof.start()
            elif step == steps:
                prof.stop()
        generate(m, rows, max_new_tokens=steps + 1, greedy=True, on_step=on_step)
        ops = {e.key: (e.self_cpu_time_total / steps, e.count / steps)
               for e in prof.key_averages()}
        whole = sum(t for t, _ in ops.values())
        print(f"{label}: one decode step, {whole / 1e3:.1f} ms of self CPU time")
        print(f"  {'op':<40} {'ms':>7} {'share':>6} {'calls':>6}")
        for k, (t, c) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:top]:
            print(f"  {k[:40]:<40} {t / 1e3:7.2f} {t / whole:6.1%} {c:6.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="smollm2-135m")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--layers", type=int, help="fewer layers than the shape's: a quick check")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--profile", action="store_true", help="only the top operations by self "
                        "CPU time of one B=1 decode step of ours float32 and int8")
    parser.add_argument("--compile", action="store_true", help="ours float32 with its decode "
                        "step compiled (lm sample --compile --autotune); int8 stays eager")
    parser.add_argument("--child", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    torch.set_num_threads(args.threads)
    config = SHAPES[args.shape]
    if args.layers:
        config = replace(config, n_layers=args.layers)
    torch.manual_seed(0)
    model = DecoderOnlyLM(config).eval()
    if args.profile:
        return profile(model, args.prompt)
    B, P, N = max(args.batch), args.prompt, args.new_tokens
    prompts = torch.randint(config.vocab_size, (B, P),
                            generator=torch.Generator().manual_seed(1)).tolist()
    nbytes = weight_bytes(model)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        skipped = prepare(model, d, prompts, args.engines, args.threads)
        del model
        gbs = bandwidth_gbs(nbytes)
        for name in args.engines:
            if name in skipped:
                continue
            cmd = [sys.executable, __file__, "--child", name, "--dir", tmp, "--threads",
                   str(args.threads), "--new-tokens", str(N), "--repeats", str(args.repeats),
                   "--batch", *map(str, args.batch), *(["--compile"] if args.compile else [])]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                skipped[name] = "failed: " + (done.stderr.strip().splitlines() or ["?"])[-1][:80]
                continue
            results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{args.shape} shape ({config.n_layers} layers, width {config.d_model}, "
          f"{config.n_heads}/{config.kv_heads} heads, FFN {config.d_ff}, vocabulary "
          f"{config.vocab_size}), prompt {P}, {N} new tokens, greedy, {args.threads} threads, "
          f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f}"
          + (", ours float32 compiled (--compile --autotune)" if args.compile else ""))
    floor = gbs * 1e9 / nbytes
    print(f"bandwidth floor: weights {nbytes / 1e6:.0f} MB float32, read at {gbs:.1f} GB/s "
          f"(a sum): {floor:.1f} tokens/s at batch 1")
    for name, why in skipped.items():
        print(f"  {LABELS[name]}: {why}")
    for b in args.batch:
        print(f"batch {b}:")
        print(f"  {'engine':<18} {'tokens/s':>9} {'TTFT ms':>8} {'RSS MiB':>8} | "
              f"{'f32/it':>7} {'best/it':>7} {'TTFT it/f32':>11} {'RSS it/f32':>10}")
        # ours float32, and ours at its best (the fastest of ours' engines at this batch)
        ours = {k: b * N / results[k][str(b)]["whole_s"] for k in OURS if k in results}
        best = {"ours": ours.get("ours"), "best": max(ours.values(), default=None)}
        for name, r in results.items():
            tps = b * N / r[str(b)]["whole_s"]
            ratio = "  ".join(f"{v / tps:7.2f}" if v else f"{'-':>7}" for v in best.values())
            ttft = r[str(b)]["first_s"]
            base = results.get("ours")
            rel = (f"{ttft / base[str(b)]['first_s']:11.2f} {r['rss_mb'] / base['rss_mb']:10.2f}"
                   if base else "")
            print(f"  {LABELS[name]:<18} {tps:9.1f} {ttft * 1e3:8.0f} {r['rss_mb']:8.0f} | "
                  f"{ratio} {rel}")
    if "ours" in results and 1 in args.batch:
        r = results["ours"]["1"]
        decode = (N - 1) / (r["whole_s"] - r["first_s"])
        print(f"ours float32 B=1 decode {decode:.1f} tokens/s = {decode / floor:.0%} of the "
              f"bandwidth floor ({floor:.1f}); goal >= 80%")
    print(json.dumps({"load": os.getloadavg()[0], "bandwidth_gbs": gbs, "weight_bytes": nbytes,
                      "skipped": skipped, "results": results}))


if __name__ == "__main__":
    main()
