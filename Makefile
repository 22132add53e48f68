# `make test` and `make demo` work on a fresh checkout: the first run creates .venv/ with the
# pinned tools of requirements-dev.txt and builds the extension into it (release mode, installed
# editable, so Python sources are picked up without rebuilding). Later runs redo only the steps
# whose inputs changed, tracked by stamp files in .venv/.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

# Everything the compiled extension depends on.
EXTENSION_INPUTS := pyproject.toml Cargo.toml $(wildcard Cargo.lock) \
	$(shell find crates -name '*.rs' -o -name Cargo.toml -o -name '*.bin')

# The HDF5 filter plugin, shipped inside the Python package (amrzip.hdf5.plugin_path()).
HDF5_PLUGIN := python/amrzip/hdf5/plugins/libh5zamrzip.so
CARGO_TARGET_DIR ?= target

.PHONY: setup demo test wheel clean

setup: $(VENV)/.extension-built $(HDF5_PLUGIN)

$(BIN)/python:
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
		echo "error: '$(PYTHON) -m venv' failed; on Debian/Ubuntu install python3-venv" >&2; exit 1; }

$(VENV)/.tools-installed: requirements-dev.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

$(VENV)/.extension-built: $(VENV)/.tools-installed $(EXTENSION_INPUTS)
	VIRTUAL_ENV=$(abspath $(VENV)) $(BIN)/maturin develop --release
	@touch $@

# Copied then renamed: overwriting a shared object in place breaks processes that have it loaded.
$(HDF5_PLUGIN): $(EXTENSION_INPUTS)
	cargo build --release -p amrzip-hdf5
	@mkdir -p $(@D)
	cp $(CARGO_TARGET_DIR)/release/libh5zamrzip.so $@.tmp && mv -f $@.tmp $@

# A wheel of the package with the extension and the HDF5 plugin inside, in dist/.
wheel: $(VENV)/.tools-installed $(HDF5_PLUGIN)
	$(BIN)/maturin build --release -o dist

demo: setup
	$(BIN)/amrzip demo

test: setup
	cargo test --release --workspace
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) target dist python/amrzip/_core*.so $(dir $(HDF5_PLUGIN))
