# Two entry points, both doing all set-up on a fresh machine:
#   make demo   a ThinLTO link through cached-dist with the default cache and runner
#   make test   ruff, mypy --strict and the pytest suite (what .ci/run runs)
export PATH := $(CURDIR)/.venv/bin:/usr/lib/llvm-22/bin:$(PATH)

.PHONY: setup demo test lint bench sanitize

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

# The native shard decoder under AddressSanitizer + UBSan, fed damaged real shards
# (scripts/sanitize; CC=clang to use clang, MUTATIONS=N for more).
sanitize: setup
	scripts/sanitize
