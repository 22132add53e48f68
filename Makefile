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

# The C API (crates/capi): libamrzip.so and libamrzip.a, declared in include/amrzip.h (generated
# by cbindgen, committed). `make install` puts them under PREFIX; `make setup` copies them into the
# Python package too, where `amrzip config` finds them. docs/capi.md has the details.
PREFIX ?= /usr/local
CAPI_SO := $(CARGO_TARGET_DIR)/release/libamrzip.so
CAPI_A := $(CARGO_TARGET_DIR)/release/libamrzip.a
CAPI_PKG := python/amrzip/capi
CAPI_PACKAGED := $(CAPI_PKG)/include/amrzip.h $(CAPI_PKG)/lib/libamrzip.so $(CAPI_PKG)/lib/libamrzip.a \
	$(CAPI_PKG)/lib/pkgconfig/amrzip.pc
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml)
# The cbindgen command line, pinned, built into .venv/ by `cargo install --locked` (its own
# dependencies pinned by its lock file); only `make header` and the check in `make test` run it.
CBINDGEN_VERSION := 0.29.4
CBINDGEN := $(VENV)/.cbindgen-$(CBINDGEN_VERSION)
CBINDGEN_RUN = $(BIN)/cbindgen --quiet --config crates/capi/cbindgen.toml crates/capi --output
# The system libraries a program linking libamrzip.a needs: those of Rust's standard library, as
# rustc lists them for any static library (the codec's dependencies add none; the static
# example's link in `make examples` would fail if one did).
STATIC_LIBS = $(shell d=$$(mktemp -d) && echo | rustc --crate-type staticlib --crate-name probe \
	--print native-static-libs -o $$d/probe.a - 2>&1 | sed -n 's/^note: native-static-libs: //p'; rm -rf $$d)
# amrzip.pc for the prefix $(1), with the extra link flags $(2).
comma := ,
pc_file = sed -e 's|@PREFIX@|$(1)|' -e 's|@RPATH@|$(2)|' -e 's|@VERSION@|$(VERSION)|' \
	-e 's|@STATIC_LIBS@|$(STATIC_LIBS)|' crates/capi/amrzip.pc.in
# The static archive without the debugging sections of Rust's standard library, a third of its size.
strip_static = strip --strip-debug -o $(2) $(1)

.PHONY: setup demo test docs wheel clean capi header check-header install examples

setup: $(VENV)/.extension-built $(HDF5_PLUGIN) $(CAPI_PACKAGED)

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

capi: $(CAPI_SO) $(CAPI_A)

# One cargo run builds both. Touched because cargo leaves them as they are when nothing they are
# made of changed, while any source of the workspace makes them look out of date here.
$(CAPI_SO) $(CAPI_A) &: $(EXTENSION_INPUTS)
	cargo build --release -p amrzip-capi
	@touch $(CAPI_SO) $(CAPI_A)

$(CBINDGEN): | $(BIN)/python
	cargo install cbindgen --version =$(CBINDGEN_VERSION) --locked --root $(VENV)
	@touch $@

header: $(CBINDGEN)
	$(CBINDGEN_RUN) include/amrzip.h

# Into build/ and compared, not `cbindgen --verify`, which rewrites the header it finds stale.
check-header: $(CBINDGEN)
	@mkdir -p build
	$(CBINDGEN_RUN) build/amrzip.h
	@diff -u include/amrzip.h build/amrzip.h || \
		{ echo "error: include/amrzip.h does not match crates/capi: run 'make header' and commit it" >&2; exit 1; }

install: capi
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/amrzip.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(CAPI_SO) $(DESTDIR)$(PREFIX)/lib/
	$(call strip_static,$(CAPI_A),$(DESTDIR)$(PREFIX)/lib/libamrzip.a)
	$(call pc_file,$(PREFIX),) > $(DESTDIR)$(PREFIX)/lib/pkgconfig/amrzip.pc

$(CAPI_PKG)/include/amrzip.h: include/amrzip.h
	@mkdir -p $(@D)
	cp $< $@

# Copied then renamed, like the HDF5 plugin.
$(CAPI_PKG)/lib/libamrzip.so: $(CAPI_SO)
	@mkdir -p $(@D)
	cp $< $@.tmp && mv -f $@.tmp $@

$(CAPI_PKG)/lib/libamrzip.a: $(CAPI_A)
	@mkdir -p $(@D)
	$(call strip_static,$<,$@)

# Relocatable: the package's lib/ is wherever it is installed, and on no linker's search path.
$(CAPI_PKG)/lib/pkgconfig/amrzip.pc: crates/capi/amrzip.pc.in Cargo.toml
	@mkdir -p $(@D)
	$(call pc_file,$${pcfiledir}/../..,-Wl$(comma)-rpath$(comma)$${libdir} ) > $@

# The C and C++ examples, built as a user would: with `amrzip config`, and with pkg-config against
# an installed copy (compiling compress.c as C++ there, which checks the header's extern "C").
# amr_writer writes a snapshot from memory and reads it back; read_snapshot reads it in C.
EXAMPLES := build/examples
AMRZIP := $(BIN)/amrzip
STRICT := -Wall -Wextra -Werror
examples: setup
	@mkdir -p $(EXAMPLES)
	$(CC) $$($(AMRZIP) config --cflags) examples/c/compress.c $$($(AMRZIP) config --libs) -o $(EXAMPLES)/compress
	$(EXAMPLES)/compress
	$(CC) $(STRICT) -std=c99 -pedantic $$($(AMRZIP) config --cflags) examples/c/lossless.c \
		$$($(AMRZIP) config --libs --static) -o $(EXAMPLES)/lossless
	@! readelf -d $(EXAMPLES)/lossless | grep -q libamrzip || { echo "error: lossless needs libamrzip.so" >&2; exit 1; }
	$(EXAMPLES)/lossless
	$(CXX) $(STRICT) -std=c++17 $$($(AMRZIP) config --cflags) examples/cpp/amr_writer.cpp $$($(AMRZIP) config --libs) -o $(EXAMPLES)/amr_writer
	rm -rf $(EXAMPLES)/store
	$(EXAMPLES)/amr_writer $(EXAMPLES)/store
	$(CC) $(STRICT) -std=c99 -pedantic $$($(AMRZIP) config --cflags) examples/c/read_snapshot.c $$($(AMRZIP) config --libs) -lm \
		-o $(EXAMPLES)/read_snapshot
	$(EXAMPLES)/read_snapshot $(EXAMPLES)/store
	$(AMRZIP) check $(EXAMPLES)/store
	@if command -v pkg-config >/dev/null && command -v $(CXX) >/dev/null; then \
		set -ex; \
		$(MAKE) --no-print-directory install PREFIX=$(abspath $(EXAMPLES)/prefix); \
		export PKG_CONFIG_PATH=$(abspath $(EXAMPLES)/prefix)/lib/pkgconfig; \
		$(CXX) $(STRICT) -x c++ examples/c/compress.c $$(pkg-config --cflags --libs amrzip) -o $(EXAMPLES)/compress-cxx; \
		LD_LIBRARY_PATH=$(abspath $(EXAMPLES)/prefix)/lib $(EXAMPLES)/compress-cxx; \
	else \
		echo "warning: no pkg-config or $(CXX): skipped building an example against 'make install'" >&2; \
	fi

# A wheel of the package with the extension, the HDF5 plugin and the C API inside, in dist/.
wheel: $(VENV)/.tools-installed $(HDF5_PLUGIN) $(CAPI_PACKAGED)
	$(BIN)/maturin build --release -o dist

demo: setup
	$(BIN)/amrzip demo

test: setup check-header examples
	cargo test --release --workspace
	$(BIN)/python -m pytest -q

# The documentation site (mkdocs.yml, docs/) into site/, its figures first made by the benchmarks'
# code. --strict turns every warning (a broken link, a page missing from the nav) into an error.
# The Material theme prints a notice of its end of life (May 2027) on every build unless
# NO_MKDOCS_2_WARNING is set; it says nothing about this site.
docs: setup $(VENV)/.docs-tools-installed
	$(BIN)/python benches/docs_figures.py docs/img
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

$(VENV)/.docs-tools-installed: docs/requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r docs/requirements.txt -c requirements-dev.txt
	@touch $@

clean:
	rm -rf $(VENV) target dist site docs/img build/examples build/amrzip.h python/amrzip/_core*.so $(dir $(HDF5_PLUGIN)) \
		$(CAPI_PKG)/include $(CAPI_PKG)/lib
