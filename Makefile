# Loom: the two set-up commands of the README, and a few more.
#   make run    create .venv, install Loom, serve the API with SQLite and an example fabric
#   make test   install what the tests need (Debian's frr, frr-pythontools, postgresql, chromium, haproxy as root), run them
#               TIER=unit|component|lab|browser runs one tier (pytest -m TIER; an expression such as
#               TIER='unit or component' works too); without TIER every tier runs (unit and component
#               on JOBS=N xdist workers, 3 by default; then lab and browser tests two at a time; then traffic labs and lease-timing tests alone)
#   make bench  the benchmark tables (not part of the tests)
#   make lint   ruff, mypy, the import-layer contracts and tools/arch.py (CI runs it beside the tests)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000
APT_PACKAGES := frr frr-pythontools postgresql iproute2 iputils-ping procps chromium nftables haproxy pg-auto-failover-cli postgresql-15-auto-failover

.PHONY: run test bench lint venv install system-deps clean proto

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

venv: $(BIN)/python

# Editable install; re-run when the project's metadata changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed proto

# gRPC stubs of the device agent, generated at build time into southbound/_gen/ (git-ignored).
PROTOS := $(shell find southbound/proto -name '*.proto')
proto: southbound/_gen/.stamp
southbound/_gen/.stamp: $(PROTOS) | $(VENV)/.installed
	rm -rf southbound/_gen && mkdir -p southbound/_gen
	$(BIN)/python -m grpc_tools.protoc -I southbound/proto --python_out=southbound/_gen \
	  --pyi_out=southbound/_gen --grpc_python_out=southbound/_gen $(PROTOS)
	touch $@

system-deps:
	@if [ "$$(id -u)" = "0" ]; then \
	  if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	  fi; \
	else echo "not root: skipping Debian packages (lab, PostgreSQL and HAProxy tests will skip)"; fi

run: install
	$(BIN)/loom serve --example --host 127.0.0.1 --port $(PORT)

TIER ?=
# Without TIER: the unit and component tiers on JOBS pytest-xdist workers (each module on one worker, its
# shared servers set up once: tests/conftest.py); then the lab and browser tiers on LAB_JOBS workers (two
# labs at a time), except the labs that measure traffic (marker traffic: tests/conftest.py's TRAFFIC_LABS)
# and the lease-timing tests (marker alone), which run last, one at a time, alone on the machine.
# Within each xdist run the modules that take minutes start first, longest first (tests/conftest.py's
# LONG_MODULES: keep it in step with the --durations of CI), so that no long module starts last and runs alone.
# JOBS=0 and LAB_JOBS=0: no workers.
# Before them, tests/warm.py compiles the numba kernels once (in a fresh clone, each worker would otherwise
# compile them all at once).
JOBS ?= 3
LAB_JOBS ?= 2
XDIST := $(if $(filter-out 0,$(JOBS)),-n $(JOBS) --dist loadscope)
LAB_XDIST := $(if $(filter-out 0,$(LAB_JOBS)),-n $(LAB_JOBS) --dist loadscope)
# pytest's exit status 5 is "no test selected" (PYTEST_ARGS naming modules of one kind only)
PYTEST := $(BIN)/python -m pytest -q -rs --durations=15
test: system-deps install
ifeq ($(TIER),)
	$(BIN)/python -m tests.warm
	$(PYTEST) $(XDIST) -m "not lab and not browser and not alone" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PYTEST) $(LAB_XDIST) -m "(lab or browser) and not traffic and not alone" $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(PYTEST) -m "traffic or alone" $(PYTEST_ARGS) || [ $$? -eq 5 ]
else
	$(PYTEST) $(if $(filter lab browser,$(TIER)),,$(XDIST)) -m "$(TIER)" $(PYTEST_ARGS)
endif

bench: system-deps install
	$(BIN)/python -m tests.bench $(BENCH_ARGS)

# ruff, mypy, the import layers of DESIGN.md's Layout as import-linter contracts (pyproject.toml), and
# tools/arch.py: no file-level import cycle, a reason on every deferred import, short functions and modules
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy controller api solver safety southbound labs tools
	$(BIN)/lint-imports
	$(BIN)/python tools/arch.py --stats

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
