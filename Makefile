# tracekit: the README's two commands are `make demo` and `make test`.
# Both create .venv (if missing) and install the project into it first. `make test` (and `make aot`) then run
# tools/build_aot.py when the kernels' sources changed since its manifest: it compiles the numba kernels once into
# numba's on-disk cache (tools/warm_numba.py, ~10-40 s CPU), so the suite's workers do not compile them, then
# compiles the signatures that warm-up reached ahead of time into tracekit/_aot_kernels_<k> (numba pycc, two
# processes, ~36 s CPU, 33-70 s wall), so CLI commands run them without importing numba (~0.4 s a process).
# Without a C compiler it warns in one line and the JIT runs them. `make demo` starts that build in the background
# after the demo instead of before it.

# Python may cache bytecode here even where the environment turns it off (PYTHONDONTWRITEBYTECODE): without the
# cache every process (each pytest worker, each CLI subprocess a test starts) compiles tracekit's modules and
# pytest's assertion rewriting of the test modules again (~7 s per worker on this 2-core machine).
unexport PYTHONDONTWRITEBYTECODE

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DEMO   := demo_out

.PHONY: aot demo interop-tools test test-full lint typecheck typecheck-core typecheck-layers layers duplicates sizes docstrings format bench proto install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# MLCommons Chakra from the package index (mlc-chakra, Apache-2.0) in a venv of its own, .venv-chakra: its decoder,
# chakra_jsonizer, chakra_converter and chakra_trace_link, which the interop tests run on what tracekit writes and on
# the real captures (tests/reference_tools.py finds it there or through $$TRACEKIT_CHAKRA_PYTHON; without it those tests
# skip and say why). A venv of its own because mlc-chakra requires HolisticTraceAnalysis, which brings about 60
# packages (jupyterlab, pandas, ipython) that the test environment does not need; .ci/run installs it.
CHAKRA_VENV := .venv-chakra
interop-tools: $(CHAKRA_VENV)/.installed-stamp

$(CHAKRA_VENV)/.installed-stamp:
	test -x $(CHAKRA_VENV)/bin/python || $(PYTHON) -m venv $(CHAKRA_VENV)
	$(CHAKRA_VENV)/bin/python -m pip install --quiet 'mlc-chakra==1.0.0'
	touch $@

# Build the ahead-of-time kernels again. `make test` and `make demo` do it when a module of kernels (one importing
# tracekit.jit) changed since the manifest was written: until then such a kernel runs through numba's JIT, and every
# command that calls it pays numba's import again (~0.4 s). Without a C compiler there is no manifest, so they re-run
# the warm-up (a few seconds, cached) and warn each time.
AOT_MANIFEST := tracekit/_aot_kernels.json
KERNEL_SOURCES := $(shell grep -rl --include='*.py' 'tracekit.jit import' tracekit converters replayer)
aot: $(STAMP)
	$(PY) tools/build_aot.py

$(AOT_MANIFEST): $(KERNEL_SOURCES) tracekit/jit.py tracekit/_aot.py tools/build_aot.py tools/warm_numba.py | $(STAMP)
	$(PY) tools/build_aot.py

# The main job on the bundled real traces. A first run does not wait for the ahead-of-time build (issue 32: it made
# a fresh clone's `make demo` take 8 min): the demo's kernels compile through numba's JIT as its steps reach them
# (the demo says so; ~1 min of CPU, cached), and when the manifest is missing or stale the build starts afterwards
# in the background (nice 10, log in .venv/aot-build.log); `make test` and `make aot` wait for it.
demo: $(STAMP)
	$(PY) -m tracekit.cli.demo --out $(DEMO)
	@$(PY) tools/build_aot.py --background

GATES := typecheck-core typecheck-layers lint duplicates sizes docstrings

# Gates first, two at a time: the two mypy runs (cold from a fresh clone ~15 and ~17 s CPU, measured 2026-12-01)
# start first, side by side, and the short gates (~5 s CPU together) follow on whichever finishes first;
# --output-sync prints each gate's output in one piece when it ends. Then the suite, which includes the import-layer gate
# (tests/core/test_layers.py); docs/architecture.md says what the gates hold.
# Two pytest workers (pytest-xdist), one test file per worker at a time so module fixtures are built once (two files
# that share a per-process cache count as one: tests/conftest.py SHARED); the longest files first
# (tests/conftest.py HEAVY_FIRST; --no-loadscope-reorder keeps that order).
PYTEST_XDIST := -n 2 --dist loadfile --no-loadscope-reorder
test: $(STAMP) $(AOT_MANIFEST)
	@$(MAKE) --no-print-directory -j2 --output-sync=target $(GATES)
	$(PY) -m pytest -ra $(PYTEST_XDIST)

# Everything `make test` runs plus the tests marked `slow` (the full interop matrices), with the full hypothesis
# profile (more examples per property); tests/conftest.py reads HYPOTHESIS_PROFILE.
test-full: $(STAMP) $(AOT_MANIFEST)
	@$(MAKE) --no-print-directory -j2 --output-sync=target $(GATES)
	HYPOTHESIS_PROFILE=full $(PY) -m pytest -ra --run-slow $(PYTEST_XDIST)

# ruff lint rules in pyproject [tool.ruff.lint] (blind excepts included), then the format check ([tool.ruff.format]).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy on the tracekit package, then on converters/ + replayer/ (tools/typecheck_layers.py); strict on the core
# modules listed in pyproject [tool.mypy].
typecheck: typecheck-core typecheck-layers

typecheck-core: $(STAMP)
	$(VENV)/bin/mypy

typecheck-layers: $(STAMP)
	$(PY) tools/typecheck_layers.py

# Import layers: core never imports converters/replayer, converters and replayer never import each other.
layers: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/core/test_layers.py

# Repeated blocks of >= 6 lines, failing above the baseline in pyproject [tool.tracekit.duplicates].
duplicates: $(STAMP)
	$(PY) tools/check_duplicates.py

# No file over 500 lines, no function over 80 (baseline of today's offenders in pyproject [tool.tracekit.sizes]).
sizes: $(STAMP)
	$(PY) tools/check_sizes.py

# Public functions, classes and methods have docstrings (baseline in pyproject [tool.tracekit.docstrings]).
docstrings: $(STAMP)
	$(PY) tools/check_docstrings.py

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Speed and memory figures (not part of `make test`).
bench: $(STAMP)
	$(PY) benchmarks/run.py

# Regenerate the committed protobuf module from schema/et_def.proto.
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Ischema --python_out=tracekit/_proto schema/et_def.proto

clean:
	rm -rf $(VENV) $(CHAKRA_VENV) $(DEMO) .pytest_cache .hypothesis .mypy_cache .ruff_cache .mypy_tree tracekit/_aot_kernels*
