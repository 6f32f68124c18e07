# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The local CPU wheel of PyTorch; pinned so pip never pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)" || $(PY) -m pip install -q --index-url https://download.pytorch.org/whl/cpu "torch>=2.4"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m decoderkit demo

test: $(STAMP)
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m pytest -n 2

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/decoder_layer.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
