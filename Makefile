# Two commands set everything up on a fresh machine:
#   make demo   - create .venv, install fpr, run the built-in demo (no download, no GPU)
#   make test   - create .venv, install fpr with test extras, run the test suite
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python

.PHONY: demo test bench clean

# A download cut off halfway (seen in CI: ray's 79 MB wheel stopped at 33 MB, six times) must not fail the
# set-up: pip resumes a cut download (--resume-retries, pip >= 25.1) and the whole install is tried again
# after a pause; wheels already downloaded come from pip's cache on the next attempt.
PIP_NET := --retries 10 --timeout 60
PIP_ATTEMPTS := 4
INSTALL_SPEC := -e '.[cpu,test]'

define pip_retry
	@for attempt in $$(seq 1 $(PIP_ATTEMPTS)); do \
	    $(PY) -m pip install --quiet $(PIP_NET) $(1) && exit 0; \
	    [ $$attempt -lt $(PIP_ATTEMPTS) ] || break; \
	    echo "pip install failed (attempt $$attempt of $(PIP_ATTEMPTS)); retrying in $$((attempt * 15)) s" >&2; \
	    sleep $$((attempt * 15)); \
	done; \
	echo "pip install $(1) failed $(PIP_ATTEMPTS) times: check the network or the package index, then rerun make" >&2; \
	exit 1
endef

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(call pip_retry,--upgrade 'pip>=25.1')
	$(call pip_retry,--resume-retries 20 $(INSTALL_SPEC))
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/fpr demo

test: $(VENV)/.installed
	$(PY) -m pytest

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_map.py

clean:
	rm -rf $(VENV) fpr-workspace
