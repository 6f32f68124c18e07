# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed
# The test (and bench) environment is exactly requirements/test.lock (the versions the suite was
# run with); `make lock` re-pins it after a change to pyproject.toml's extras, `make lock UPGRADE=1` moves
# every package to its newest release: both a deliberate commit. The lock pins PyTorch's CPU wheel
# (torch==2.13.0+cpu, no nvidia-* packages): PyPI has no such version, so uv takes it from TORCH_FROM
# and can never pull PyPI's multi-GB CUDA build.
LOCK := requirements/test.lock
# TORCH_FROM, where that wheel comes from: the folder TORCH_WHEELS where it exists (no download),
# else (a laptop, a cloud VM, or TORCH_WHEELS=) the torch page of PyTorch's CPU wheel index, whose
# links carry each file's sha256 (uv checks it). Either way a --find-links source beside PyPI: only
# torch comes from it (as --extra-index-url, uv would take every package that index holds, numpy
# and jinja2 among them, from it alone), and uv leaves it out of the lock, so `make lock` writes
# the same lock from both.
TORCH_WHEELS ?= /opt/wheels
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_FROM := $(or $(wildcard $(TORCH_WHEELS)),$(TORCH_INDEX)/torch/)
UV_VERSION := 0.13.9
LOCK_FLAGS := --extra test --extra bench --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--find-links $(TORCH_FROM) --override requirements/torch-cpu.txt
CHECK_CPU_TORCH := import importlib.metadata as m, torch; \
	gpu = sorted(d.metadata["Name"] for d in m.distributions() \
	if d.metadata["Name"].lower().startswith(("nvidia", "triton"))); \
	assert torch.version.cuda is None and not gpu, f"not a CPU-only torch: {torch.__version__} {gpu}"

# The optional extra llamacpp (llama-cpp-python: the GGUF export's tests run llama.cpp with it) is
# not in the lock: it builds llama.cpp from its source distribution, about 7 minutes on two cores.
# `make llamacpp` builds it once into WHEELS_CACHE, for any x86-64 CPU with AVX2 (no
# -march=native: one wheel for the AVX2-only and the AVX-512 machines alike), and installs it;
# the set-up above installs it from there whenever that wheel is cached. Without it, the tests
# that need llama.cpp are skipped, saying so.
LLAMACPP_VERSION := 0.3.36
WHEELS_CACHE ?= /work/wheels-cache
LLAMACPP_WHEEL := $(firstword $(wildcard $(WHEELS_CACHE)/llama_cpp_python-$(LLAMACPP_VERSION)-*.whl))
LLAMACPP_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_AVX512=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
	-DLLAMA_CURL=OFF

llamacpp: $(STAMP)
	test -n "$(LLAMACPP_WHEEL)" || CMAKE_ARGS="$(LLAMACPP_CMAKE)" $(PY) -m pip wheel -q --no-deps \
		-w $(WHEELS_CACHE) llama-cpp-python==$(LLAMACPP_VERSION)
	$(UV) pip install -q --python $(PY) $(WHEELS_CACHE)/llama_cpp_python-$(LLAMACPP_VERSION)-*.whl

# llama.cpp's converter (convert_hf_to_gguf.py with its conversion/ and vendored gguf-py/), from
# the same version's source distribution, into .venv/llama.cpp: the GGUF reader's tests convert
# tiny random directories with it (tests/interop/gguf_convert.py; skipped without it)
LLAMACPP_SRC := $(VENV)/llama.cpp
LLAMACPP_PARTS := convert_hf_to_gguf.py conversion gguf-py
# `make test` runs it: where the registry cannot be reached, one line says so and those tests are
# reported as SKIPPED
CONVERTER_MISSING := note: llama.cpp's converter could not be fetched, so the GGUF reader's \
	conversion tests will be SKIPPED; fetch it with: make llamacpp-src

llamacpp-src: $(STAMP)
	test -f $(LLAMACPP_SRC)/convert_hf_to_gguf.py || { tmp=$$(mktemp -d) && \
		$(PY) -m pip download -q --no-deps --no-binary :all: -d $$tmp \
			llama-cpp-python==$(LLAMACPP_VERSION) && mkdir -p $(LLAMACPP_SRC) && \
		tar xzf $$tmp/llama_cpp_python-$(LLAMACPP_VERSION).tar.gz -C $(LLAMACPP_SRC) \
			--strip-components=3 $(addprefix llama_cpp_python-$(LLAMACPP_VERSION)/vendor/llama.cpp/,$(LLAMACPP_PARTS)) && \
		rm -r $$tmp; } || echo "$(CONVERTER_MISSING)"

.PHONY: demo lm-demo tune-demo bible-demo test lint bench clean browser sword sandbox lock llamacpp \
	llamacpp-src

$(UV):
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q "uv==$(UV_VERSION)"

# --compile-bytecode: the packages' .pyc files are written once here, not by the first test
# processes to import them (about 20 s of CPU per process on a fresh environment)
$(STAMP): pyproject.toml $(LOCK) | $(UV)
	$(UV) pip sync -q --compile-bytecode --python $(PY) --find-links $(TORCH_FROM) $(LOCK)
	$(UV) pip install -q --python $(PY) --no-deps -e .
	$(if $(LLAMACPP_WHEEL),$(UV) pip install -q --python $(PY) $(LLAMACPP_WHEEL))
	$(UV) pip check -q --python $(PY)
	$(PY) -c '$(CHECK_CPU_TORCH)'
	touch $(STAMP)

lock: | $(UV)
	$(UV) pip compile -q $(LOCK_FLAGS) $(if $(UPGRADE),--upgrade) -o $(LOCK) pyproject.toml

# Where the CPU has AVX2, the demos hold the math libraries to it, so an AVX-512 CPU prints what an
# AVX2 one does: its own kernels round differently and training takes another path (checked: the
# dates demo on a Zen 4 ends at 99.40% held-out exact match unheld, at 97.60% held, as on an AVX2
# EPYC; the figures in README.md)
ifneq ($(shell grep -qsw avx2 /proc/cpuinfo && echo avx2),)
demo lm-demo tune-demo bible-demo: export ONEDNN_MAX_CPU_ISA := AVX2
demo lm-demo tune-demo bible-demo: export MKL_ENABLE_INSTRUCTIONS := AVX2
demo lm-demo tune-demo bible-demo: export MKL_CBWR := AVX2
demo lm-demo tune-demo bible-demo: export ATEN_CPU_CAPABILITY := avx2
endif

# Train the built-in dates task on CPU (stops at 97% held-out exact match or after 2,000 steps:
# bounded by steps, not seconds, so a slow or busy machine prints the same lines), print
# held-out translations, then translate with the saved checkpoint.
DEMO_TRAIN := --task dates --out runs/dates --overwrite --layers 2 --d-model 64 --heads 4 \
	--d-ff 256 --dropout 0 --batch-size 64 --warmup 200 --lr-factor 0.35 --train-size 50000 \
	--valid-size 500 --valid-every 125 --max-steps 2000 --target-exact 0.97 \
	--show 8 --threads 1

demo: $(STAMP)
	$(PY) -m decoderkit train $(DEMO_TRAIN)
	$(PY) -m decoderkit translate --checkpoint runs/dates "29 Nov 2026" "Sunday, 29 November 2026"

# Get the Shakespeare text, train a GPT on it on the CPU (nanoGPT's architecture and size on
# byte-level BPE tokens, as GPT-1 and GPT-2 pretrain: a 2000-token vocabulary learnt from the
# training part; 3000 steps: about 8 minutes on 2 quiet cores; bounded by steps, not seconds,
# so the loss is the same wherever it runs at the same thread count), print its loss on all of
# the held-out text (per token and per character) and a sample. OMP_WAIT_POLICY=PASSIVE: idle
# OpenMP workers sleep (a shared CPU). benchmarks/transfer.py fine-tunes this model.
LM_DEMO_TRAIN := --text runs/shakespeare/shakespeare.txt --out runs/shakespeare-bpe --overwrite \
	--tokenizer bpe --vocab-size 2000 --block-size 64 --batch-size 16 --lr 2e-3 --min-lr 2e-4 \
	--warmup 100 --max-steps 3000 --valid-every 1000 --eval-blocks 200 --threads 2

lm-demo: $(STAMP)
	$(PY) -m decoderkit lm data shakespeare --out runs/shakespeare
	OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit lm train $(LM_DEMO_TRAIN)
	OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit lm eval --checkpoint runs/shakespeare-bpe \
		--text runs/shakespeare/valid.txt --threads 2
	OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit lm sample --checkpoint runs/shakespeare-bpe \
		--prompt "ROMEO." --max-new-tokens 120 --temperature 0.8 --seed 1 --threads 1

# LoRA on real text: the lm-demo's Shakespeare, pretrained on the Llama block (--preset llama:
# RMSNorm, RoPE, SwiGLU, grouped key/value heads; 2000 BPE tokens), then tuned by lm tune (LoRA
# r 8 on q_proj,v_proj) on its plays' First Folio genres as questions (lm data
# shakespeare-genres --questions: "Comedy, history or tragedy?", a 128-character passage,
# "Answer:", the genre; at most 150 passages a play, as many of each genre: 1,200 each in
# training), and scored before and after on the six held-out plays (lm eval --choices: the
# likeliest of the three answers; chance 1/3). Bounded by steps, 2 threads.
TUNE_BASE := runs/shakespeare-llama
TUNE_QA := runs/genre-questions
TUNE_TRAIN := --preset llama --text runs/shakespeare/shakespeare.txt --out $(TUNE_BASE) \
	--overwrite --tokenizer bpe --vocab-size 2000 --block-size 128 --batch-size 16 --lr 2e-3 \
	--min-lr 2e-4 --warmup 100 --max-steps 1500 --valid-every 500 --eval-blocks 100 --threads 2
TUNE_LORA := --checkpoint $(TUNE_BASE) --data $(TUNE_QA)/train.jsonl --out runs/genres-lora \
	--overwrite --rank 8 --alpha 16 --lr 1e-3 --warmup 20 --batch-size 16 --max-steps 300 \
	--valid-every 100 --threads 2
TUNE_SCORE := --checkpoint $(TUNE_BASE) --choices $(TUNE_QA)/test.jsonl --threads 2

tune-demo: $(STAMP)
	$(PY) -m decoderkit lm data shakespeare --out runs/shakespeare
	$(PY) -m decoderkit lm data shakespeare-genres --questions --chars 128 --per-play 150 \
		--out $(TUNE_QA)
	OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit lm train $(TUNE_TRAIN)
	@echo "before tuning (the pretrained model):"
	OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit lm eval $(TUNE_SCORE)
	OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit lm tune $(TUNE_LORA)
	@echo "after tuning (its LoRA adapter):"
	OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit lm eval $(TUNE_SCORE) --adapter runs/genres-lora

# Spanish -> English on real text: the Bible (decoderkit data bible: Reina-Valera 1909 and King
# James from Debian's SWORD modules, split by book) into runs/bible, a small Transformer trained
# for a fixed number of steps (the same model wherever it runs at the same thread count), then
# test BLEU and chrF by sacrebleu (with its signature) at beam 4 against the King James and,
# where test.tsv has its third column (sword-text-web), the World English Bible too, and five
# test verses beside their references. The recipe and its reasons: docs/bible.md.
# BIBLE_WARMUP at most BIBLE_STEPS; a pipeline check: BIBLE_STEPS=40 BIBLE_WARMUP=40; a busy
# machine: BIBLE_THREADS=1 (two OpenMP threads wait on each other; a different model then)
BIBLE_STEPS ?= 800
BIBLE_WARMUP ?= 400
BIBLE_THREADS ?= 2
BIBLE_TRAIN := --data runs/bible/train.tsv --out runs/bible-es-en --overwrite --layers 2 \
	--d-model 128 --heads 4 --d-ff 512 --dropout 0.1 --attention-dropout 0 --ffn-dropout 0 \
	--smoothing 0.1 --tokenizer spm-joint --vocab-size 4000 --tie-embeddings --tie-generator --ema 0.995 \
	--max-len 200 --batch-size 64 --warmup $(BIBLE_WARMUP) --lr-factor 1 --max-steps $(BIBLE_STEPS) \
	--valid-every 400 --valid-size 200 --threads $(BIBLE_THREADS) --quiet --show 0
BIBLE_TEST := runs/bible-es-en-test
BIBLE_DECODE := --beam 4 --length-penalty 0.6 --batch-size 64 --workers $(BIBLE_THREADS)
# the second reference where the WEB has the verse, else the first again (a duplicate
# reference scores exactly as one); none when test.tsv has no third column
BIBLE_REFS := if [ "$$(head -1 runs/bible/test.tsv | awk -F'\t' '{print NF}')" = 3 ]; then \
	awk -F'\t' '{print ($$3 != "" ? $$3 : $$2)}' runs/bible/test.tsv > $(BIBLE_TEST)/test.web; \
	echo $(BIBLE_TEST)/test.web; fi

bible-demo: $(STAMP) sword
	$(PY) -m decoderkit data bible --src spa --tgt eng --out runs/bible
	OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit train $(BIBLE_TRAIN)
	mkdir -p $(BIBLE_TEST)
	cut -f1 runs/bible/test.tsv > $(BIBLE_TEST)/test.spa
	cut -f2 runs/bible/test.tsv > $(BIBLE_TEST)/test.eng
	OMP_NUM_THREADS=$(BIBLE_THREADS) OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit translate \
		--checkpoint runs/bible-es-en $(BIBLE_DECODE) < $(BIBLE_TEST)/test.spa > $(BIBLE_TEST)/test.hyp
	$(VENV)/bin/sacrebleu $(BIBLE_TEST)/test.eng $$($(BIBLE_REFS)) -i $(BIBLE_TEST)/test.hyp \
		-m bleu chrf -w 1
	@paste $(BIBLE_TEST)/test.spa $(BIBLE_TEST)/test.hyp $(BIBLE_TEST)/test.eng | head -5 | \
		awk -F'\t' '{print "source:    " $$1 "\nours:      " $$2 "\nreference: " $$3 "\n"}'

# The explorer's browser tests drive Debian's chromium (Playwright launches that binary): installed
# here when missing and this user may install packages (root, or sudo without a password);
# otherwise one line says what to install, and those tests are reported as SKIPPED.
BROWSER_MISSING := note: chromium is not installed, so the explorer's browser tests will be \
	SKIPPED; install it with: sudo apt-get install chromium
browser:
	@if command -v chromium >/dev/null 2>&1; then :; else $(call apt_install,chromium,$(BROWSER_MISSING)); fi

# $(call apt_install,PACKAGES,MESSAGE): apt-get install PACKAGES where this user may (root, or
# sudo without a password), else (or if that fails) print MESSAGE
apt_install = if ! command -v apt-get >/dev/null 2>&1; then echo "$(2)"; \
	elif [ "$$(id -u)" = 0 ]; then (apt-get update -q && apt-get install -y -q $(1)) || echo "$(2)"; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		(sudo apt-get update -q && sudo apt-get install -y -q $(1)) || echo "$(2)"; \
	else echo "$(2)"; fi

# The Bible corpus (decoderkit data bible) reads Debian's SWORD modules: installed as chromium is
# above; otherwise one line says what to install (its real-module tests are then SKIPPED).
# sword-text-web: the World English Bible, the test books' second English reference
SWORD_PACKAGES := sword-text-kjv sword-text-sparv sword-text-web
SWORD_MISSING := note: the SWORD Bible modules are not installed, so data bible cannot run and \
	its real-module tests will be SKIPPED; install them with: sudo apt-get install $(SWORD_PACKAGES)
sword:
	@if dpkg -s $(SWORD_PACKAGES) >/dev/null 2>&1; then :; \
	else $(call apt_install,$(SWORD_PACKAGES),$(SWORD_MISSING)); fi

# `decoderkit grade` runs learner code inside Debian's bubblewrap (docs/grading.md, "The
# sandbox"): installed as chromium is above; otherwise grading prints one note and the sandbox's
# tests are SKIPPED.
SANDBOX_MISSING := note: bubblewrap is not installed, so the grader runs learner code without its \
	sandbox and the sandbox's tests will be SKIPPED; install it with: sudo apt-get install bubblewrap
sandbox:
	@if command -v bwrap >/dev/null 2>&1; then :; else $(call apt_install,bubblewrap,$(SANDBOX_MISSING)); fi

# The engine and precision comparisons (pytest -m engines) run once more with the math libraries
# held to each instruction set of ENGINE_ISAS that this CPU has, as on a user's CPU without
# AVX-512; `make test ENGINE_ISAS="AVX2 GENERIC"` adds the libraries' generic code paths. Only
# the files that mark such tests are collected again (ENGINE_TESTS), not the whole suite.
ENGINE_TESTS = $$(grep -rl --include='test_*.py' 'pytest.mark.engines' tests)
ENGINE_ISAS ?= AVX2
ISA_ENV_AVX2 := ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 \
	CT2_FORCE_CPU_ISA=AVX2
ISA_ENV_GENERIC := ONEDNN_MAX_CPU_ISA=SSE41 MKL_ENABLE_INSTRUCTIONS=SSE4_2 \
	ATEN_CPU_CAPABILITY=default CT2_FORCE_CPU_ISA=GENERIC
ISA_FLAG_AVX2 := avx2
ISA_FLAG_GENERIC := sse4_1
engines_under = if grep -qw $(ISA_FLAG_$(1)) /proc/cpuinfo; then \
	echo "engine comparisons again, the libraries held to $(1):"; \
	env $(ISA_ENV_$(1)) $(PY) -m pytest -n 2 -rs -m engines $(ENGINE_TESTS); \
	else echo "note: this CPU has no $(1): the engine comparisons are not rerun under it"; fi

# ruff (style and mistakes) and import-linter (the layers, imports only downward)
lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks
	$(VENV)/bin/lint-imports

test: lint browser sword sandbox llamacpp-src
	$(PY) -m pytest -n 2 -rs  # -rs: each skipped test listed with its reason
	$(foreach isa,$(ENGINE_ISAS),$(call engines_under,$(isa)) && ) true

bench: $(STAMP)
	$(PY) benchmarks/decoder_layer.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
