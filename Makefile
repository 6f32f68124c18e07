# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The local CPU wheel of PyTorch; pinned so pip never pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: demo lm-demo test lint bench clean browser

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

# Train the built-in dates task on CPU (<= 5 min: stops at 97% held-out exact match or after
# 200 s of training), print held-out translations, then translate with the saved checkpoint.
DEMO_TRAIN := --task dates --out runs/dates --overwrite --layers 2 --d-model 64 --heads 4 \
	--d-ff 256 --dropout 0 --batch-size 64 --warmup 200 --lr-factor 0.35 --train-size 50000 \
	--valid-size 500 --valid-every 125 --max-steps 5000 --time-limit 200 --target-exact 0.97 \
	--show 8 --threads 1

demo: $(STAMP)
	$(PY) -m decoderkit train $(DEMO_TRAIN)
	$(PY) -m decoderkit translate --checkpoint runs/dates "29 Nov 2026" "Sunday, 29 November 2026"

# Get the Shakespeare text, train a character-level GPT on it on the CPU (nanoGPT's architecture
# and size, <= 180 s of training on 2 threads), print its loss on all of the held-out text and
# a sample. OMP_WAIT_POLICY=PASSIVE: idle OpenMP workers sleep (a shared CPU).
LM_DEMO_TRAIN := --text runs/shakespeare/shakespeare.txt --out runs/shakespeare-char --overwrite \
	--block-size 64 --batch-size 16 --lr 2e-3 --min-lr 2e-4 --warmup 100 --max-steps 3000 \
	--eval-every 500 --eval-blocks 200 --time-limit 180 --threads 2

lm-demo: $(STAMP)
	$(PY) -m decoderkit lm data shakespeare --out runs/shakespeare
	OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit lm train $(LM_DEMO_TRAIN)
	OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit lm eval --checkpoint runs/shakespeare-char \
		--text runs/shakespeare/valid.txt --threads 2
	OMP_WAIT_POLICY=PASSIVE $(PY) -m decoderkit lm sample --checkpoint runs/shakespeare-char \
		--prompt "ROMEO." --max-new-tokens 300 --temperature 0.8 --seed 1 --threads 1

# The explorer's browser tests drive Debian's chromium (Playwright launches that binary): installed
# here when missing and this user may install packages (root, or sudo without a password);
# otherwise one line says what to install, and those tests are reported as SKIPPED.
BROWSER_MISSING := note: chromium is not installed, so the explorer's browser tests will be \
	SKIPPED; install it with: sudo apt-get install chromium
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "$(BROWSER_MISSING)"; \
	elif [ "$$(id -u)" = 0 ]; then \
		(apt-get update -q && apt-get install -y -q chromium) || echo "$(BROWSER_MISSING)"; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		(sudo apt-get update -q && sudo apt-get install -y -q chromium) || \
		echo "$(BROWSER_MISSING)"; \
	else echo "$(BROWSER_MISSING)"; fi

test: $(STAMP) browser
	$(PY) -m ruff check src tests benchmarks
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -n 2 -rs  # -rs: each skipped test listed with its reason

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench,export]"
	$(PY) benchmarks/decoder_layer.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
