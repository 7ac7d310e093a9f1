# The two commands a fresh machine needs:  make demo   and   make test
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
WORKERS ?= 2
DURATIONS ?= 15
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-hub setup system build check clean

## Set everything up, build the release, grade a demo class and print the results.
demo: system $(STAMP)
	$(BIN)/mlbook demo

## The whole test suite (what .ci/run calls). One BLAS thread per kernel: the workers
## already keep both cores busy, and oversubscribed BLAS threads slow small matmuls 10x.
## The hub suite (tests/hub) runs after the xdist suite, on its own and serially: a hub, five
## people's servers and a browser beside sandboxed lab grading on two cores only measure the load.
## Each run ends with its 15 slowest items, so a test that grew slow names itself.
test: system $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup --durations=$(DURATIONS) --ignore=tests/hub tests
	$(MAKE) test-hub

## The course on JupyterHub (as root: it creates and removes the students' system accounts).
test-hub: system $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
	$(BIN)/python -m pytest -p no:xdist --durations=$(DURATIONS) tests/hub

setup: $(STAMP)

## Debian packages the sandbox, the PostgreSQL tests and the browser suites need (.ci/system-packages).
system:
	@pkgs="$$(grep -v '^#' .ci/system-packages | tr '\n' ' ')"; \
	if dpkg -s $$pkgs >/dev/null 2>&1; then echo "system packages present"; \
	else $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$pkgs >/dev/null; fi

# torch first, from the CPU wheel pinned in pyproject: otherwise pip resolves a CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[grader,test,hub]"
	npm install --silent --no-audit --no-fund --prefix $(VENV)/hub-proxy configurable-http-proxy@5.3.0
	rm -f $(VENV)/.installed-*
	touch $@

build: $(STAMP)
	$(BIN)/mlbook build

check: $(STAMP)
	$(BIN)/mlbook check

clean:
	rm -rf autograded submitted feedback exports reports gradebook.db
