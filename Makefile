# Two commands do all set-up on a fresh machine:
#   make serve   install kbroker alone (its runtime dependencies) into .venv and run a single
#                node (port 9092, data in ./data)
#   make test    install kbroker with the test extra (clients, PySpark, linters) and kcat,
#                then run every test
VENV ?= .venv
# The interpreter the virtualenv is made from. Its build decides much of a request's CPU:
# see docs/benchmarks.md, "The interpreter's build".
PYTHON ?= python3
# pytest-xdist workers for the unit tests (kbroker.testing's ports are split between them).
TEST_WORKERS ?= 2
PY := $(VENV)/bin/python
# Separate stamps: `make serve` never pulls the test extra's hundreds of MB.
SERVE_STAMP := $(VENV)/.installed-serve
STAMP := $(VENV)/.installed
SOURCES := pyproject.toml setup.py kbroker/protocol/_recordwalk.c kbroker/protocol/_requestread.c \
	kbroker/protocol/_responsewrite.c \
	kbroker/security/_tlsread.c \
	kbroker/protocol/_recordcodec.c

.PHONY: serve test test-fast lint bench pyz docs fuzz

PIP := $(PY) -m pip --disable-pip-version-check

# The virtualenv starts without a pip of its own (ensurepip is a quarter of the serve
# install's CPU): $(PYTHON)'s pip installs into it (pip --python), and only where it has
# no pip that can does the virtualenv get one.
$(VENV)/bin/python:
	$(PYTHON) -m venv --without-pip $(VENV)

# The editable install builds the C extensions next to their sources, where it imports
# them from; nothing else is needed to serve.
$(SERVE_STAMP): $(SOURCES) | $(VENV)/bin/python
	if $(PYTHON) -m pip --python $(PY) --version >/dev/null 2>&1; then \
	  $(PYTHON) -m pip --disable-pip-version-check --python $(PY) install --quiet --no-compile -e .; \
	else \
	  $(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip --default-pip >/dev/null; \
	  $(PIP) install --quiet --no-compile -e .; \
	fi
	touch $(SERVE_STAMP)

$(STAMP): $(SOURCES) | $(VENV)/bin/python
	$(PY) -m pip --version >/dev/null 2>&1 || $(PY) -m ensurepip --default-pip >/dev/null
	$(PIP) install --quiet --upgrade pip setuptools
	$(PIP) install --quiet -e ".[test]"
	# The C extensions next to their sources, where an editable install imports them from.
	$(PY) setup.py --quiet build_ext --inplace
	touch $(STAMP)

serve: $(SERVE_STAMP)
	$(VENV)/bin/kbroker serve $(ARGS)

test: $(STAMP)
	bash scripts/install-test-tools.sh
	# Again, in case the tools script just brought a C extension's headers.
	$(PY) setup.py --quiet build_ext --inplace
	# A skipped test fails the run (conftest.py): every tool a test needs is installed above.
	# The unit tests (tests/) run in process and share out over TEST_WORKERS; the
	# compatibility tests (compat_tests/) run one at a time, since each of them starts
	# brokers and clients that want the machine's cores, and some bound a latency.
	FORBID_SKIPPED_TESTS=1 $(VENV)/bin/pytest tests -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)
	FORBID_SKIPPED_TESTS=1 $(VENV)/bin/pytest compat_tests $(PYTEST_ARGS)

# The inner loop: the unit tests that start no process and wait on no cluster (a few minutes).
test-fast: $(STAMP)
	$(VENV)/bin/pytest -m "not slow" -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# Coverage-guided fuzzing of the C extensions that read hostile bytes, a minute each
# (fuzz/run.sh; tests/test_c_fuzz.py runs a shorter pass in make test).
fuzz: $(STAMP)
	bash scripts/install-test-tools.sh
	PYTHON=$(PY) bash fuzz/run.sh recordwalk
	PYTHON=$(PY) bash fuzz/run.sh recordcodec
	PYTHON=$(PY) bash fuzz/run.sh requestread

# docs/configuration.md, docs/compatibility.md, docs/cli.md's reference and the metric table
# of docs/operations.md, generated from the code (tests/test_docs.py fails when they are stale)
docs: $(STAMP)
	$(PY) -m kbroker.docs

# dist/kbroker.pyz: one file holding kbroker and its dependencies (python3 kbroker.pyz serve)
pyz: $(STAMP)
	$(PY) -m pip install --quiet shiv
	PYTHON=$(PY) bash scripts/build-dist.sh dist

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[test,bench]"
	$(PY) bench/run.py $(ARGS)
