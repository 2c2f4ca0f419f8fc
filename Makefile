# Two entry points, both doing all set-up on a fresh machine:
#   make demo   a ThinLTO link through cached-dist with the default cache and runner
#   make test   ruff, mypy --strict and the pytest suite (what .ci/run runs)
export PATH := $(CURDIR)/.venv/bin:/usr/lib/llvm-22/bin:$(PATH)

.PHONY: setup demo test lint bench fuzz

setup:
	scripts/setup

demo: setup
	scripts/demo

lint: setup
	ruff check .
	ruff format --check .
	mypy

test: lint
	python -m pytest -q

bench: setup
	python -m benchmarks run

# The job-file fuzzer's long run (CI runs 100 cases of it inside `make test`).
fuzz: setup
	CACHED_DIST_FUZZ_CASES=$${CACHED_DIST_FUZZ_CASES:-2000} python -m pytest -q tests/test_jobfile_fuzz.py
