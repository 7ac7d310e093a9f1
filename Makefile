# The two commands a fresh machine needs:  make demo   and   make test
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
WORKERS ?= 2

.PHONY: demo test setup build check clean

## Set everything up, build the release, grade a demo class and print the results.
demo: $(STAMP)
	$(BIN)/mlbook demo

## The whole test suite (what .ci/run calls). One BLAS thread per kernel: the workers
## already keep both cores busy, and oversubscribed BLAS threads slow small matmuls 10x.
test: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
	$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup tests

setup: $(STAMP)

# torch first, from the CPU wheel pinned in pyproject: otherwise pip resolves a CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[grader,test]"
	rm -f $(VENV)/.installed-*
	touch $@

build: $(STAMP)
	$(BIN)/mlbook build

check: $(STAMP)
	$(BIN)/mlbook check

clean:
	rm -rf autograded submitted feedback exports reports gradebook.db
