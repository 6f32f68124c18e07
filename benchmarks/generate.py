"""Generation speed: ours (cache or not, float32 or int8) beside nn.Transformer, HF Marian,
CTranslate2, and our own export run by CTranslate2 and by ONNX Runtime.

Every engine runs in the same process on the same sizes: N=6+6 layers, d_model 512, 8 heads,
d_ff 2048, vocabulary 8000, a 64-token source, exactly 64 new tokens (min length = max length),
random weights, float32, eval. Columns: batch 1 and 16, greedy and beam 4. Printed: generated
tokens per second (B x 64 / seconds; beam counts the returned hypothesis) and, per engine, the
ratio ours / that engine (> 1: ours is faster), where ours is the faster of our two cached
inference paths in that column (the compiled step, the prepacked eager one: a server picks the
one that suits its batches; both are printed). Peers missing from the environment are skipped
with a note (install the ``bench`` and ``export`` extras). Compiling happens in the warm-up
runs, outside the timings; one compiled step serves every column.

Rows of the export issue: ours with int8 linears (``generation.int8``; eager and compiled),
our model exported (``interop``) to CTranslate2 float32 and int8 and to ONNX (our own search
over ONNX Runtime sessions). The last column is each engine's memory: the peak resident memory
(VmHWM, which never goes below zero) of a fresh process that imported every engine's packages,
built our model, built only that engine from it (our PyTorch model then freed where the engine
holds its own copy) and ran one batch-16 greedy call (``--rss``). The peak of such a process
that built our model and no engine is printed above the table, the floor of the column.

    .venv/bin/python benchmarks/generate.py [--quick] [--batch 1 16] [--beam 1 4]
        [--skip-peers] [--skip-slow] [--skip-compile] [--skip-rss] [--threads 2] [--repeats 2]
    .venv/bin/python benchmarks/generate.py --marian [--quick] [--repeats 1] [--new-tokens 16]

``--marian``: the opus-mt-size rows of the Marian issue instead: a random MarianMTModel (6+6
layers, width 512, 8 heads, FFN 2048, vocabulary 58101, swish) read by ``interop.marian``;
ours float32 (prepacked) and int8 beside HF ``generate`` and CTranslate2 (its own converter)
float32 and int8 on those same weights.

Legend: B batch, K beam size, S source length, T new tokens, V vocabulary.
"""

from __future__ import annotations

import os

# Idle OpenMP workers sleep instead of spinning (read once, before torch and CTranslate2 load):
# on a CPU shared with other jobs, spinning workers stall every parallel region (measured
# here: 3x slower at batch 1). Every engine of the run gets the same setting.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import copy  # noqa: E402
import gc  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

from decoderkit import make_model  # noqa: E402
from decoderkit.generation.seq2seq.compiled import compile_step  # noqa: E402
from decoderkit.generation.seq2seq.decoding import greedy_decode  # noqa: E402
from decoderkit.generation.seq2seq.int8 import quantize_int8  # noqa: E402
from decoderkit.nn.packing import prepack  # noqa: E402
from decoderkit.generation.seq2seq.search import beam_search  # noqa: E402
from decoderkit.generation.seq2seq.step import decode_step  # noqa: E402
from decoderkit.nn.masks import causal_mask  # noqa: E402
from decoderkit.training.seq2seq.checkpoint import Checkpoint  # noqa: E402
from decoderkit.text.seq2seq.tokenizer import Tokenizer  # noqa: E402


def ours(model, use_cache: bool, step=decode_step, retire: bool = False):
    def run(src, T, K):
        if K == 1:
            out = greedy_decode(model, src, None, max_len=T, min_len=T, use_cache=use_cache,
                                step=step)
        else:
            out = beam_search(model, src, None, beam_size=K, max_len=T, min_len=T,
                              use_cache=use_cache, step=step, retire=retire)
        return int(out.lengths.sum())
    return run


class NaiveTorch(nn.Module):
    """nn.Transformer with embeddings and an output layer, decoded by re-running the whole
    prefix every step (the textbook loop without a cache); greedy only."""

    def __init__(self, V: int, d: int, h: int, f: int, N: int):
        super().__init__()
        self.core = nn.Transformer(d, h, N, N, f, dropout=0.0, batch_first=True)
        self.src_embed, self.tgt_embed = nn.Embedding(V, d), nn.Embedding(V, d)
        self.out = nn.Linear(d, V)

    @torch.inference_mode()
    def run(self, src, T, K):
        if K != 1:
            return None
        memory = self.core.encoder(self.src_embed(src))  # (B, S, d)
        tgt = torch.ones(src.size(0), 1, dtype=torch.long)  # (B, 1) BOS
        for _ in range(T):
            t = tgt.size(1)
            x = self.core.decoder(self.tgt_embed(tgt), memory, tgt_mask=~causal_mask(t),
                                  tgt_is_causal=True)  # (B, t, d)
            tgt = torch.cat([tgt, self.out(x[:, -1]).argmax(-1, keepdim=True)], dim=1)
        return (tgt.size(1) - 1) * src.size(0)


def marian(V: int, d: int, h: int, f: int, N: int, S: int):
    """A random-init MarianMT model of our configuration (relu FFN, post-norm, sinusoids)."""
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(vocab_size=V, d_model=d, encoder_layers=N, decoder_layers=N,
                          encoder_attention_heads=h, decoder_attention_heads=h,
                          encoder_ffn_dim=f, decoder_ffn_dim=f, activation_function="relu",
                          max_position_embeddings=max(512, 2 * S), dropout=0.0,
                          attention_dropout=0.0, activation_dropout=0.0, scale_embedding=True,
                          pad_token_id=V - 1, eos_token_id=0, decoder_start_token_id=V - 1,
                          forced_eos_token_id=None, bad_words_ids=None)
    torch.manual_seed(0)
    return MarianMTModel(config).eval()


def hf_runner(model, use_cache: bool):
    @torch.inference_mode()
    def run(src, T, K):
        out = model.generate(input_ids=src, attention_mask=torch.ones_like(src), num_beams=K,
                             do_sample=False, min_new_tokens=T, max_new_tokens=T,
                             use_cache=use_cache, early_stopping=False)
        return (out.size(1) - 1) * src.size(0)  # minus the decoder start token
    return run


def ct2_translator(model, compute_type: str, threads: int, folder: str):
    """Convert the Marian model with CTranslate2's own Transformers converter."""
    import ctranslate2

    V = model.config.vocab_size
    vocab = {"</s>": 0, "<unk>": 1, **{f"t{i}": i for i in range(2, V - 1)}, "<pad>": V - 1}
    tokenizer = SimpleNamespace(get_vocab=lambda: vocab, eos_token="</s>", unk_token="<unk>")
    model.config.save_pretrained(folder)

    class InMemory(ctranslate2.converters.TransformersConverter):
        def load_model(self, *args, **kwargs):
            return model

        def load_tokenizer(self, *args, **kwargs):
            return tokenizer

    out = f"{folder}/ct2-{compute_type}"
    InMemory(folder).convert(out, quantization=None if compute_type == "float32" else
                             compute_type, force=True)
    translator = ctranslate2.Translator(out, device="cpu", compute_type=compute_type,
                                        intra_threads=threads, inter_threads=1)
    names = {i: t for t, i in vocab.items()}

    def run(src, T, K):
        batch = [[names[i] for i in row] for row in src.tolist()]
        res = translator.translate_batch(batch, beam_size=K, min_decoding_length=T,
                                         max_decoding_length=T, length_penalty=1.0)
        return sum(len(r.hypotheses[0]) for r in res)
    return run


def as_checkpoint(model) -> Checkpoint:
    """``model`` with a V-token vocabulary (one character per id), as export takes it."""
    V = model.config.tgt_vocab
    tok = Tokenizer.characters(["".join(chr(0x4E00 + i) for i in range(V - 4))])
    return Checkpoint(model, model.config, tok, tok, step=0, path=None)


def exported_ct2(ckpt, folder: str, weights: str, threads: int):
    """Our model through ``export_ctranslate2``, run by CTranslate2's Translator."""
    from decoderkit.interop.seq2seq.ctranslate2 import Ctranslate2Engine, export_ctranslate2

    out = f"{folder}/ours-ct2-{weights}"
    export_ctranslate2(ckpt, out, weights, overwrite=True)
    translator = Ctranslate2Engine(out, threads=threads).translator
    names = ckpt.src_tokenizer.tokens(range(ckpt.config.src_vocab))

    def run(src, T, K):
        batch = [[names[i] for i in row] for row in src.tolist()]
        res = translator.translate_batch(batch, beam_size=K, min_decoding_length=T,
                                         max_decoding_length=T, max_input_length=0)
        return sum(len(r.hypotheses[0]) for r in res)
    return run


def exported_onnx(ckpt, folder: str, threads: int):
    """Our model through ``export_onnx``, decoded by our own loops over ONNX Runtime."""
    from decoderkit.interop.onnx.export import export_onnx
    from decoderkit.interop.onnx.runtime import load_onnx

    out = f"{folder}/ours-onnx"
    export_onnx(ckpt, out, overwrite=True)
    engine = load_onnx(out, threads).model
    return ours(engine, True, engine.step)


OURS = ("ours, cache, compiled", "ours, cache, prepacked")  # the ratio's base: the faster


def rate(run, src, T, K) -> float | None:
    """Generated tokens per second of one run (None: the engine has no such mode)."""
    start = time.perf_counter()
    tokens = run(src, T, K)
    if tokens is None:
        return None
    if tokens != src.size(0) * T:
        raise RuntimeError(f"expected {src.size(0) * T} tokens, got {tokens}")
    return tokens / (time.perf_counter() - start)


def measure(engines: dict, src, T, K, repeats: int) -> dict:
    """Best rate per engine over ``repeats`` rounds; each round runs every engine once, in
    turn, so load from other jobs spreads over all of them. Cache-less engines (minutes per
    run) join the first round only. One short warm-up run each first; compiled engines also
    run one full call, so that their compiling is done before the rounds."""
    best = {}
    for name, run in engines.items():
        best[name] = None if run(src, 2, K) is None else 0.0
        if "compiled" in name:
            run(src, T, K)
    for round_ in range(repeats):
        for name, run in engines.items():
            slow = "no cache" in name or "recompute" in name
            if best[name] is not None and not (slow and round_ > 0):
                best[name] = max(best[name], rate(run, src, T, K))
    return best


def build(name: str, model, a, folder: str):
    """The engine called ``name`` for ``model`` (one of ``ENGINES``)."""
    V, d, h, f, N = (model.config.tgt_vocab, model.config.d_model, model.config.n_heads,
                     model.config.d_ff, model.config.n_layers)
    if name == "ours, cache, compiled":
        plain = copy.deepcopy(model)  # compiled with its weights frozen in, GEMMs autotuned
        return ours(plain, True, compile_step(plain, autotune=True))
    if name == "ours, cache, prepacked":
        return ours(prepack(copy.deepcopy(model)), True)
    if name == "ours, cache":
        return ours(model, True)
    if name == "ours int8, cache":
        return ours(quantize_int8(model), True)
    if name == "ours int8, cache, compiled":
        q = quantize_int8(model)
        return ours(q, True, compile_step(q))
    if name == "ours, no cache":
        return ours(model, False)
    if name == "nn.Transformer, recompute":
        return NaiveTorch(V, d, h, f, N).eval().run
    if name.startswith("ours export -> CTranslate2"):
        return exported_ct2(as_checkpoint(model), folder, name.split()[-1], a.threads)
    if name == "ours export -> ONNX Runtime":
        return exported_onnx(as_checkpoint(model), folder, a.threads)
    hf = marian(V, d, h, f, N, 64)
    if name.startswith("HF Marian"):
        return hf_runner(hf, "no cache" not in name)
    return ct2_translator(hf, name.split()[-1], a.threads, folder)


ENGINES = ("ours, cache, compiled", "ours, cache, prepacked", "ours, cache",
           "ours int8, cache", "ours int8, cache, compiled", "ours, no cache",
           "nn.Transformer, recompute", "ours export -> CTranslate2 float32",
           "ours export -> CTranslate2 int8", "ours export -> ONNX Runtime",
           "HF Marian generate, cache", "HF Marian generate, no cache", "CTranslate2 float32",
           "CTranslate2 int8")


OPUS_MT = dict(V=58101, d=512, h=8, f=2048, N=6)  # opus-mt's size (e.g. opus-mt-en-de)


def opus_mt(quick: bool):
    """A random opus-mt-size MarianMTModel (swish, shared embeddings, pad row zero) and the
    same weights read by ``interop.marian`` as our model."""
    from transformers import MarianConfig, MarianMTModel

    from decoderkit.interop.marian.hf import build_model, read_config

    o = dict(OPUS_MT, N=2) if quick else OPUS_MT
    config = MarianConfig(vocab_size=o["V"], d_model=o["d"], encoder_layers=o["N"],
                          decoder_layers=o["N"], encoder_attention_heads=o["h"],
                          decoder_attention_heads=o["h"], encoder_ffn_dim=o["f"],
                          decoder_ffn_dim=o["f"], activation_function="swish",
                          max_position_embeddings=512, scale_embedding=True,
                          pad_token_id=o["V"] - 1, decoder_start_token_id=o["V"] - 1,
                          eos_token_id=0, forced_eos_token_id=None, bad_words_ids=None)
    torch.manual_seed(0)
    hf = MarianMTModel(config).eval()
    with tempfile.TemporaryDirectory() as folder:
        config.save_pretrained(folder)
        our_config, _ = read_config(folder)
    model = build_model(our_config, Path("MarianMTModel"), hf.state_dict()).eval()
    return model, hf


def marian_rows(a) -> None:
    """``--marian``: ours (float32 prepacked, int8) and HF generate and CTranslate2 on the
    same opus-mt-size weights; our beam search with HF's rule (``retire``), as theirs."""
    model, hf = opus_mt(a.quick)
    T, S = a.new_tokens or (16 if a.quick else 64), 64
    V = model.config.src_vocab
    folder = tempfile.TemporaryDirectory()
    engines = {
        "ours, cache, prepacked": ours(prepack(copy.deepcopy(model)), True, retire=True),
        "ours int8, cache": ours(quantize_int8(model), True, retire=True),
        "HF Marian generate, cache": hf_runner(hf, True),
        "CTranslate2 float32": ct2_translator(hf, "float32", a.threads, folder.name),
        "CTranslate2 int8": ct2_translator(hf, "int8", a.threads, folder.name)}
    cells = [(B, K) for K in a.beam for B in a.batch]
    src = {B: torch.randint(3, V - 1, (B, S), generator=torch.Generator().manual_seed(B))
           for B in a.batch}
    c = model.config
    print(f"Marian opus-mt size: N={c.n_layers}+{c.n_layers} d={c.d_model} h={c.n_heads} "
          f"f={c.d_ff} V={V} swish S={S} T={T} threads={a.threads} torch {torch.__version__}; "
          f"generated tokens/s (ratio: ours float32 / engine; int8 rows: ours int8 / engine)")
    print(f"{'engine':<30}" + "".join(f"{f'B={B} ' + ('greedy' if K == 1 else f'beam {K}'):>22}"
                                      for B, K in cells))
    rates = {}
    for B, K in cells:
        for name, r in measure(engines, src[B], T, K, a.repeats).items():
            rates[name, B, K] = r
    for name in engines:
        base = "ours int8, cache" if "int8" in name else "ours, cache, prepacked"
        print(f"{name:<30}" + "".join(
            f"{f'{rates[name, B, K]:9.1f} (x{rates[base, B, K] / rates[name, B, K]:5.2f})':>22}"
            for B, K in cells), flush=True)
    folder.cleanup()


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux: VmHWM), in MB."""
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def rss_child(a, name: str | None) -> float:
    """Peak RSS of a fresh process that built ``name`` (None: nothing) and ran B=16 greedy."""
    argv = [sys.executable, __file__, "--rss", name or "", "--threads", str(a.threads)]
    argv += ["--quick"] if a.quick else []
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def rss_only(a) -> None:
    """``--rss NAME``: print this process's peak RSS after building NAME and one call (our
    model freed first where the engine no longer needs it: exports, copies)."""
    import transformers  # noqa: F401  (every run imports the same packages: a fair baseline)
    import ctranslate2  # noqa: F401
    import onnxruntime  # noqa: F401

    N, T = (2, 16) if a.quick else (6, 64)
    torch.manual_seed(0)
    model = make_model(8000, 8000, N, 512, 2048, 8, dropout=0.0).eval()
    if a.rss:
        folder = tempfile.TemporaryDirectory()
        run = build(a.rss, model, a, folder.name)
        del model  # engines that copied or exported the weights do not need ours
        gc.collect()
        run(torch.randint(3, 7999, (16, 64), generator=torch.Generator().manual_seed(16)), T, 1)
    print(f"{peak_rss_mb():.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2+2 layers, 16 new tokens")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    p.add_argument("--beam", type=int, nargs="+", default=[1, 4])
    p.add_argument("--skip-peers", action="store_true", help="only ours")
    p.add_argument("--skip-slow", action="store_true", help="no cache-less engines")
    p.add_argument("--skip-compile", action="store_true", help="no compiled step")
    p.add_argument("--skip-rss", action="store_true", help="no resident-memory column")
    p.add_argument("--rss", help=argparse.SUPPRESS)  # internal: one engine's memory, see rss_child
    p.add_argument("--marian", action="store_true",
                   help="the opus-mt-size Marian rows instead (ours, HF, CTranslate2)")
    p.add_argument("--new-tokens", type=int, help="--marian: tokens generated per call "
                   "(default 64; fewer for a shorter run on a busy machine)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3,
                   help="interleaved rounds per cell (best kept); cache-less engines: one")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if a.rss is not None:
        return rss_only(a)
    if a.marian:
        return marian_rows(a)
    N, T = (2, 16) if a.quick else (6, 64)
    V, d, h, f, S = 8000, 512, 8, 2048, 64
    torch.manual_seed(0)
    model = make_model(V, V, N, d, f, h, dropout=0.0).eval()
    skip = set()
    if a.skip_compile:
        skip |= {n for n in ENGINES if "compiled" in n}
    if a.skip_slow:
        skip |= {"ours, no cache", "nn.Transformer, recompute", "HF Marian generate, no cache"}
    if a.skip_peers:
        skip |= {n for n in ENGINES if not n.startswith("ours")}
    folder = tempfile.TemporaryDirectory()
    engines = {}
    for name in ENGINES:
        if name in skip:
            continue
        try:
            engines[name] = build(name, model, a, folder.name)
        except ImportError as err:
            print(f"skipping {name}: {err}")
    cells = [(B, K) for K in a.beam for B in a.batch]
    src = {B: torch.randint(3, V - 1, (B, S), generator=torch.Generator().manual_seed(B))
           for B in a.batch}
    print(f"N={N}+{N} d={d} h={h} f={f} V={V} S={S} T={T} threads={a.threads} "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']} torch {torch.__version__}; "
          f"generated tokens/s (ratio: best of ours, cache, compiled|prepacked / engine)")
    header = "".join(f"{f'B={B} ' + ('greedy' if K == 1 else f'beam {K}'):>22}"
                     for B, K in cells)
    if not a.skip_rss:
        print(f"peak RSS of a process that built our model and no engine: "
              f"{rss_child(a, None):.0f} MB")
    print(f"{'engine':<36}{header}{'peak MB':>10}")
    rates = {}
    for B, K in cells:
        for name, r in measure(engines, src[B], T, K, a.repeats).items():
            rates[name, B, K] = r
    for name in engines:
        row = []
        for B, K in cells:
            r = rates[name, B, K]
            base = max(rates.get((n, B, K)) or 0.0 for n in OURS)
            row.append("-" if r is None else f"{r:9.1f} (x{base / r:5.2f})")
        mem = "-" if a.skip_rss else f"{rss_child(a, name):.0f}"
        print(f"{name:<36}" + "".join(f"{c:>22}" for c in row) + f"{mem:>10}", flush=True)
    folder.cleanup()


if __name__ == "__main__":
    main()
