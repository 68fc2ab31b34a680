# Two commands set everything up on a fresh machine:
#   make demo   - create .venv, install fpr with what the demo uses (fpr[cpu]), run the built-in demo
#   make test   - the same, plus the test extras (fpr[cpu,test]), run the default test suite (not slow, not docs)
#                 on two workers (pytest -n 2)
# make test-slow / make test-docs run the two marked sets the default run leaves out (.ci/run runs all three).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: demo test test-slow test-docs bench clean

# A download cut off halfway (seen in CI: ray's 79 MB wheel stopped at 33 MB, six times) must not fail the
# set-up: pip resumes a cut download (--resume-retries, pip >= 25.1) and the whole install is tried again
# after a pause; wheels already downloaded come from pip's cache on the next attempt.
# pip prints a line per package it collects, downloads and installs (no --quiet: a set-up of minutes says
# what it is doing).
PIP_NET := --retries 10 --timeout 60
PIP_ATTEMPTS := 4
DEMO_SPEC := -e '.[cpu]'
TEST_SPEC := -e '.[cpu,test]'

define pip_retry
	@for attempt in $$(seq 1 $(PIP_ATTEMPTS)); do \
	    $(PY) -m pip install $(PIP_NET) $(1) && exit 0; \
	    [ $$attempt -lt $(PIP_ATTEMPTS) ] || break; \
	    echo "pip install failed (attempt $$attempt of $(PIP_ATTEMPTS)); retrying in $$((attempt * 15)) s" >&2; \
	    sleep $$((attempt * 15)); \
	done; \
	echo "pip install $(1) failed $(PIP_ATTEMPTS) times: check the network or the package index, then rerun make" >&2; \
	exit 1
endef

$(VENV)/.pip-ready:
	@echo "make: set-up step 1: a virtual environment in $(VENV) with pip >= 25.1"
	$(PYTHON) -m venv $(VENV)
	$(call pip_retry,--upgrade 'pip>=25.1')
	touch $@

# What the demo imports: torch (PyPI's Linux wheel brings its CUDA libraries, nvidia-* and triton: most of
# the size and of the time), numba, numpy, scipy, pandas, pyarrow, duckdb, faiss-cpu and the rest of fpr's
# dependencies (README, Set-up).
# Then fpr's numba kernels into numba's cache, as pip compiles .pyc files: a first demo loads them instead of
# compiling them (about 30 CPU seconds; it prints one line).
$(VENV)/.installed-demo: pyproject.toml $(VENV)/.pip-ready
	@echo "make: set-up step 2: fpr and what the demo uses: $(DEMO_SPEC) (about 6 GiB unpacked, torch and its CUDA libraries 5.2 GiB of it)"
	$(call pip_retry,--resume-retries 20 $(DEMO_SPEC))
	$(PY) -m fpr.workflows.kernels
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-demo
	@echo "make: set-up step 3 (make test): the test extras: $(TEST_SPEC) (ray, transformers, OpenCV, schemathesis, ...: about 1 GiB more)"
	$(call pip_retry,--resume-retries 20 $(TEST_SPEC))
	touch $@

demo: $(VENV)/.installed-demo
	$(VENV)/bin/fpr demo

# The default run on two pytest-xdist workers (one per core of the 2-core machines it is sized for): about half
# the wall time of one process. make test TEST_WORKERS=0 runs it in one process (for pdb, or -p no:xdist).
TEST_WORKERS ?= 2

test: $(VENV)/.installed-test
	$(PY) -m pytest -n $(TEST_WORKERS)

test-slow: $(VENV)/.installed-test
	$(PY) -m pytest -m slow

test-docs: $(VENV)/.installed-test
	$(PY) -m pytest -q -m docs tests/docs

bench: $(VENV)/.installed-demo
	$(PY) benchmarks/bench_map.py

clean:
	rm -rf $(VENV) fpr-workspace
