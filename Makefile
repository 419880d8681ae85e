# rlgauntlet: `make demo` and `make test` do everything on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION := 2.13.0

# the fast suite runs on both cores of a CI machine: one pytest worker per core, one torch
# thread per worker (tests/conftest.py); `make test TEST_WORKERS=1` runs it in one process
TEST_WORKERS ?= 2

.PHONY: install demo test test-shuffled test-slow browser bench clean

$(STAMP): pyproject.toml zoo/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned: an unpinned torch pulls several GB of CUDA wheels
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION)
	# the zoo's agents are a distribution of their own (rlgauntlet-zoo, from zoo/), installed first so
	# that the [zoo] extra finds it here rather than on a package index
	$(BIN)/python -m pip install -q -e ./zoo
	# [ray]: CI runs the Ray executor's test too (a head in a loopback-only namespace, where root allows)
	$(BIN)/python -m pip install -q -e ".[test,dmc,ray,zoo]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/rlgauntlet evaluate --agent zoo:cartpole-ppo --env CartPole-v1 \
		--threat gaussian_noise:std=0.1 --threat uniform_noise:eps=0.2,p=0.5 \
		--episodes 20 --n-envs 4 --out out/demo.json --store out/demo.sqlite

test: $(STAMP)
	$(BIN)/python -m pytest -q -x -n $(TEST_WORKERS) --durations=10

# the same suite in a random order (a test that leans on another's leftovers fails here)
test-shuffled: $(STAMP)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --random-order

# the slow set includes the report's browser test: Debian's Chromium driven by Playwright
# (no browser download: Playwright uses /usr/bin/chromium), and Ray for the sweep benchmarks
browser: $(STAMP)
	command -v chromium >/dev/null || (apt-get install -y chromium || (apt-get update && apt-get install -y chromium))
	$(BIN)/python -m pip install -q -e ".[test,dmc,browser,ray,zoo]"

test-slow: browser
	$(BIN)/python -m pytest -q -m slow --durations=10

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
