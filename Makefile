# tracekit: the README's two commands are `make demo` and `make test`.
# Both create .venv (if missing) and install the project into it first.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
DEMO   := demo_out

.PHONY: demo test bench proto install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The main job on the bundled real traces.
demo: $(STAMP)
	$(PY) -m tracekit.cli.demo --out $(DEMO)

test: $(STAMP)
	$(PY) -m pytest -ra

# Speed and memory figures (not part of `make test`).
bench: $(STAMP)
	$(PY) benchmarks/run.py

# Regenerate the committed protobuf module from schema/et_def.proto.
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Ischema --python_out=tracekit/_proto schema/et_def.proto

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .hypothesis
