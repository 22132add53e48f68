# `make test` and `make demo` work on a fresh checkout: the first run creates .venv/ with the
# pinned tools of requirements-dev.txt and builds the extension into it (release mode, installed
# editable, so Python sources are picked up without rebuilding). Later runs redo only the steps
# whose inputs changed, tracked by stamp files in .venv/.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

# Everything the compiled extension depends on.
EXTENSION_INPUTS := pyproject.toml Cargo.toml $(wildcard Cargo.lock) \
	$(shell find crates -name '*.rs' -o -name Cargo.toml)

.PHONY: setup demo test clean

setup: $(VENV)/.extension-built

$(BIN)/python:
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
		echo "error: '$(PYTHON) -m venv' failed; on Debian/Ubuntu install python3-venv" >&2; exit 1; }

$(VENV)/.tools-installed: requirements-dev.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

$(VENV)/.extension-built: $(VENV)/.tools-installed $(EXTENSION_INPUTS)
	VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/maturin develop --release
	@touch $@

demo: setup
	$(BIN)/amrzip demo

test: setup
	cargo test --release --workspace
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) target python/amrzip/_core*.so
