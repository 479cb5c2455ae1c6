# `make demo` and `make test` create .venv when it is missing and install into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# --no-compile: pip would byte-compile every module it installs (a third of the install's
# time), most of them never imported.
PIP := $(BIN)/pip install --disable-pip-version-check -q --no-compile -c constraints.txt
# The tests compile what they import once, into .venv/pycache: with
# PYTHONDONTWRITEBYTECODE set (as on these build machines) every process they start would
# compile torch anew from source (import torch: 5.6 s against 1.5 s), and nothing is
# written beside the sources.
PYCACHE := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache
# The larger collection of real profiler traces some tests also read, when present.
SHARED_TRACES ?= $(wildcard ../shared/traces)

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(PIP) torch==2.13.0
	$(PIP) -e .
	touch $@

# One resolve and one editable build for everything the tests need (what .installed
# holds among it), rather than installing the package twice.
$(VENV)/.installed-test: $(BIN)/python pyproject.toml constraints.txt
	$(PIP) torch==2.13.0 -e '.[test,png,hf,sweep,serve,dask,lightning,sinks]'
	touch $(VENV)/.installed $@

demo: $(VENV)/.installed
	$(BIN)/lightspeed profile mlp

test: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	$(PYCACHE) LIGHTSPEED_SHARED_TRACES=$(SHARED_TRACES) $(BIN)/python -m pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
