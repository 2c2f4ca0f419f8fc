# Two entry points, both doing all set-up on a fresh machine:
#   make demo   a ThinLTO link through cached-dist with the default cache and runner
#   make demo-dask  the same link compiled on a local Dask cluster (scheduler, workers)
#   make demo-serve the same link through the warm server (cached-dist serve)
#   make demo-reapi the same link executed on a REAPI server (buildbox-casd), then served by it
#   make test   ruff, mypy --strict and the pytest suite (what .ci/run runs)
#   make soak   300 kill trials of concurrent links (tests/test_kill_trials.py)
export PATH := $(CURDIR)/.venv/bin:/usr/lib/llvm-22/bin:$(PATH)

.PHONY: setup demo demo-remote demo-dask demo-serve demo-reapi test lint bench sanitize fuzz soak

setup:
	scripts/setup

demo:
	scripts/setup demo
	scripts/demo

# Two "machines" sharing a redis-server on a free loopback port (the remote cache tier).
demo-remote:
	scripts/setup demo-remote
	scripts/demo-remote

# A Dask scheduler and two workers on loopback, one unable to see the build directory.
demo-dask:
	scripts/setup demo-dask
	scripts/demo-dask

# buildbox-casd on a Unix socket: machine A executes every backend job on it, machine B links
# everything from its ActionCache and CAS (docs/guide.md, "REAPI").
demo-reapi:
	scripts/setup demo-reapi
	scripts/demo-reapi

# The warm server: a full hit served without starting Python (docs/guide.md).
demo-serve:
	scripts/setup demo
	scripts/demo-serve

lint: setup
	ruff check .
	ruff format --check .
	mypy

test: lint
	python -m pytest -q

bench: setup
	python -m benchmarks run

# The native shard decoder under AddressSanitizer + UBSan, fed damaged real shards, then the
# other C extensions' differential tests, the placer's with damaged zstd frames
# (scripts/sanitize; CC=clang to use clang, MUTATIONS=N, FRAME_MUTATIONS=N for more).
sanitize: setup
	scripts/sanitize

# The job-file fuzzer's long run (CI runs 100 cases of it inside `make test`).
fuzz: setup
	CACHED_DIST_FUZZ_CASES=$${CACHED_DIST_FUZZ_CASES:-2000} python -m pytest -q tests/test_jobfile_fuzz.py

# The kill trials' long run (CI runs 20 inside `make test`): 2-4 concurrent links on one
# cache, one SIGKILLed or SIGTERMed at a random moment, then relinked and checked
# (tests/test_kill_trials.py; CACHED_DIST_KILL_TRIALS=N, CACHED_DIST_KILL_SEED=S).
soak: setup
	CACHED_DIST_KILL_TRIALS=$${CACHED_DIST_KILL_TRIALS:-300} python -m pytest -q -s tests/test_kill_trials.py
