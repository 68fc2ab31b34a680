# Two commands set everything up on a fresh machine:
#   make demo   - create .venv, install fpr, run the built-in demo (no download, no GPU)
#   make test   - create .venv, install fpr with test extras, run the test suite
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: demo test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[cpu,test]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/fpr demo

test: $(VENV)/.installed
	$(PY) -m pytest

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_map.py

clean:
	rm -rf $(VENV) fpr-workspace
