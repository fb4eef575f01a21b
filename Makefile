# mtrl — one entry point for people and CI alike.
#   make test   set up (if needed), then lint + format check + types + tests: the quality gate
#   make demo   set up (if needed), then the offline end-to-end demo (local backend, embedded emulator)
#   make synth  offline `npx cdk synth` of every stack into cdk.out/
#   make bench  benchmarks that print figures
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# The Lambda runtime the functions are deployed on; the shared layer is built for it.
LAMBDA_PYTHON := 3.14
LAMBDA_PLATFORMS := --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64
LAYER_DIR := .build/lambda-deps/python
# The CDK CLI and the jsii engine of every Python CDK process run on the Node LTS pinned in package.json ("node", the
# npm registry's build of the official binaries), not on whatever `node` the machine has (Debian's is Node 20, past its
# end of life on 2026-10-30): its folder first on PATH (`npx cdk`'s `#!/usr/bin/env node`) and JSII_NODE for jsii.
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
export JSII_NODE := $(CURDIR)/node_modules/.bin/node
# Every interpreter started from here (the suite's workers and what they start, the demo) keeps its bytecode in one
# cache under .build, so each module of the venvs and the checkout is compiled once, when first imported, and then
# read by every later process and run. Never beside the sources: a test importing a staged Lambda asset
# (.build/lambda-src, the layer) would leave __pycache__ in what the next synth uploads. (A .venv-verl process
# importing torch and verl: 30 CPU-s with nothing compiled, 10 from the cache.)
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/.build/pycache

LINT_PATHS := app.py stacks mtrl lambda environments tests scripts benchmarks
TYPED_PATHS := app.py stacks mtrl lambda environments

.PHONY: help setup emulator nova verl test lint fmt typecheck pytest durations synth bench demo docs lock clean

help:
	@grep -E '^#   make' Makefile | sed 's/^#   //'

PY_STAMP := $(VENV)/.stamp-$(shell cat requirements/dev.txt requirements/llm.txt pyproject.toml 2>/dev/null | sha1sum | cut -c1-12)
NODE_STAMP := node_modules/.stamp-$(shell sha1sum package-lock.json 2>/dev/null | cut -c1-12)
LAYER_STAMP := .build/.stamp-layer-$(shell cat requirements/lambda.txt requirements/runtime.txt | sha1sum | cut -c1-12)
EMULATOR_VENV := .venv-emulator
EMULATOR_STAMP := $(EMULATOR_VENV)/.stamp-$(shell sha1sum requirements/emulator.txt 2>/dev/null | cut -c1-12)

# uv with the system's certificate store (where this machine's and CI's extra CA certificates are). Installs compile
# nothing (pip: --no-compile): the cache above compiles only what is imported.
UV_INSTALL = UV_NATIVE_TLS=1 $(BIN)/uv pip install --quiet

setup: $(PY_STAMP) $(NODE_STAMP) $(LAYER_STAMP)

$(PY_STAMP): requirements/dev.txt requirements/llm.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (set PYTHON=...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade "pip>=24"
	# uv (pinned in the dev lock) installs the locks several times faster than pip; pip bootstraps it.
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "$$(grep -E '^uv==' requirements/dev.txt | cut -d' ' -f1)"
	# The mtrl[llm] extra's torch==2.13.0 is the CPU build on this machine's disk, which pip finds (its configured
	# find-links) and uv does not look for: pip installs it first, and uv then finds the pin satisfied.
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile "$$(grep -E '^torch==' requirements/llm.txt | cut -d' ' -f1)"
	$(UV_INSTALL) --python $(BIN)/python -r requirements/dev.txt
	# The rest of the mtrl[llm] extra (transformers, trl, peft, openai) for the language-model policy tests; never in
	# the Lambda layer or the worker image.
	$(UV_INSTALL) --python $(BIN)/python -r requirements/llm.txt
	$(UV_INSTALL) --python $(BIN)/python --no-deps -e .
	rm -f $(VENV)/.stamp-* && touch $@

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "error: npm not found; install Node.js and npm (apt-get install nodejs npm)"; exit 1; }
	# Also installs the pinned Node LTS (devDependency "node"; its preinstall fetches the linux-x64 build, allowScripts).
	npm ci --no-audit --no-fund --loglevel=error
	node_modules/.bin/node --version
	rm -f node_modules/.stamp-* && touch $@

# Lambda dependencies for the Lambda platform, fetched from the package registry at setup time so
# that `cdk synth` later assembles assets offline, with no Docker.
# The layer also carries the project's pinned AWS SDK (boto3/botocore from runtime.txt): the Lambda runtime's
# own copy may predate the SageMaker serverless-MTRL and job-runtime APIs the backends call.
LAYER_SDK := boto3 botocore s3transfer urllib3
$(LAYER_STAMP): requirements/lambda.txt requirements/runtime.txt $(PY_STAMP)
	rm -rf .build/lambda-deps && mkdir -p $(LAYER_DIR)
	grep -E '^($(subst $(eval) ,|,$(LAYER_SDK)))==' requirements/runtime.txt | cut -d' ' -f1 > .build/lambda-sdk.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-compile --target $(LAYER_DIR) \
	  $(LAMBDA_PLATFORMS) --python-version $(LAMBDA_PYTHON) --implementation cp \
	  --only-binary=:all: -r requirements/lambda.txt -r .build/lambda-sdk.txt
	# Test suites and host-built bytecode are dead weight under Lambda's 250 MB unzipped limit.
	find $(LAYER_DIR) -depth -type d \( -name tests -o -name __pycache__ \) -exec rm -rf {} +
	rm -f .build/.stamp-layer-* && touch $@

# The embedded AWS emulator (MiniStack) for the demo and the emulator tests, in its own environment: it pins
# a botocore that conflicts with the project's boto3.
emulator: $(EMULATOR_STAMP)

$(EMULATOR_STAMP): requirements/emulator.txt $(PY_STAMP)
	test -x $(EMULATOR_VENV)/bin/python || $(PYTHON) -m venv $(EMULATOR_VENV)
	$(UV_INSTALL) --python $(EMULATOR_VENV)/bin/python -r requirements/emulator.txt
	rm -f $(EMULATOR_VENV)/.stamp-* && touch $@

# The Nova Forge runner's Python environment (.venv-nova): the SDK needs Python >= 3.12, so the contract tests
# (tests/contract/test_nova_runner_contract.py) run the runner's real entry point in it. It installs exactly what
# docker/nova-runner/Dockerfile installs, from the same lock (requirements/nova-runner.txt, --no-deps), then mtrl
# (editable here so the tests run the working tree; the image copies the same sources).
# The interpreter: NOVA_PYTHON if set, else python3.12 on PATH, else pyenv's 3.12.*, else 3.13.
# The lock holds the HyperPod CLI's pins (requirements/hyperpod-cli.in); zstandard 0.15.2 has no 3.12 wheel, so pip
# builds it here with the machine's C compiler (about 2 minutes, once: pip caches the wheel).
NOVA_VENV := .venv-nova
NOVA_STAMP := $(NOVA_VENV)/.stamp-$(shell cat requirements/nova-runner.txt pyproject.toml 2>/dev/null | sha1sum | cut -c1-12)
NOVA_PYTHON_CANDIDATES = $${NOVA_PYTHON:-} python3.12 $$(ls -d "$$(pyenv root 2>/dev/null)"/versions/3.12.*/bin/python \
  2>/dev/null | sort -V | tail -1) python3.13 $$(ls -d "$$(pyenv root 2>/dev/null)"/versions/3.13.*/bin/python 2>/dev/null | \
  sort -V | tail -1)

nova: $(NOVA_STAMP)

$(NOVA_STAMP): requirements/nova-runner.txt pyproject.toml $(PY_STAMP)
	@if ! test -x $(NOVA_VENV)/bin/python; then \
	  found=""; for candidate in $(NOVA_PYTHON_CANDIDATES); do \
	    if "$$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then found="$$candidate"; break; fi; \
	  done; \
	  if [ -z "$$found" ]; then \
	    echo "error: the Nova Forge contract tests need Python >= 3.12 (amzn-nova-forge requires it); none found as"; \
	    echo "       NOVA_PYTHON, python3.12, \$$(pyenv root)/versions/3.12.*, python3.13. Install one (pyenv install 3.12)"; \
	    echo "       or set NOVA_PYTHON=/path/to/python3.12."; exit 1; \
	  fi; \
	  echo "creating $(NOVA_VENV) with $$found ($$("$$found" --version))"; "$$found" -m venv $(NOVA_VENV); \
	fi
	$(NOVA_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade "pip>=24"
	$(UV_INSTALL) --python $(NOVA_VENV)/bin/python --no-deps -r requirements/nova-runner.txt
	$(UV_INSTALL) --python $(NOVA_VENV)/bin/python --no-deps -e .
	$(NOVA_VENV)/bin/python -m pip check
	rm -f $(NOVA_VENV)/.stamp-* && touch $@

# The verl agent loop's CPU contract environment (.venv-verl, Python 3.11): the CPU torch on this machine's disk (pip
# takes the local file; 2.13, not the image's 2.11: PyPI's torch 2.11.0 is the CUDA 13 build, ~0.5 GB plus several GB
# of nvidia-* wheels, and the CPU 2.11 build lives only on download.pytorch.org, which this machine cannot reach), then
# verl 0.9.1 and what its agent loop imports, exactly as locked (requirements/verl.txt,
# --no-deps, installed with uv: ~1.5 GB), then mtrl. tests/contract/test_verl_agent_loop.py runs the real agent loop
# in it.
VERL_VENV := .venv-verl
VERL_STAMP := $(VERL_VENV)/.stamp-$(shell cat requirements/verl.txt pyproject.toml 2>/dev/null | sha1sum | cut -c1-12)

verl: $(VERL_STAMP)

$(VERL_STAMP): requirements/verl.txt pyproject.toml $(PY_STAMP)
	test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-compile "torch==2.13.0"
	$(UV_INSTALL) --python $(VERL_VENV)/bin/python --no-deps -r requirements/verl.txt
	$(UV_INSTALL) --python $(VERL_VENV)/bin/python --no-deps -e .
	rm -f $(VERL_VENV)/.stamp-* && touch $@

# The import layers (pyproject.toml [tool.importlinter]): an upward import or a circle fails the gate.
lint: setup
	$(BIN)/ruff check $(wildcard $(LINT_PATHS))
	$(BIN)/ruff format --check $(wildcard $(LINT_PATHS))
	$(BIN)/lint-imports --no-logo --cache-dir .build/import-linter

fmt: setup
	$(BIN)/ruff check --fix $(wildcard $(LINT_PATHS))
	$(BIN)/ruff format $(wildcard $(LINT_PATHS))

typecheck: setup
	$(BIN)/mypy $(wildcard $(TYPED_PATHS))

# pytest exit code 5 means "no tests ran": that is a failure here, never a pass.
# Whole files go to whichever worker is free, slowest first (tests/durations.py orders them; xdist must not re-sort
# them by test count).
PYTEST_RUN = $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder
pytest: setup emulator nova verl
	rc=0; $(PYTEST_RUN) || rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests"; exit 1; fi; exit $$rc

# Re-measure tests/durations.json (seconds per test file) with a whole run.
durations: setup emulator nova verl
	$(PYTEST_RUN) --junitxml=.build/junit.xml
	$(BIN)/python tests/durations.py .build/junit.xml

# One make: the environments are built side by side (-j: mostly downloads); lint and mypy start as soon as .venv is
# ready, and pytest as soon as every environment is, without waiting for a cold mypy (about 3 CPU-minutes, on one
# core: it used to hold both of pytest's cores idle for a minute and a half of a fresh clone's set-up). Any failure
# fails the gate. No output sync: make's would hold pytest's progress back until the whole run ends; the installs
# are quiet, and mypy and ruff print their reports whole.
test:
	$(MAKE) --no-print-directory -j 4 lint typecheck pytest

synth: setup
	rm -rf cdk.out
	npx cdk synth --quiet
	@ls cdk.out/*.template.json

# The offline demo: the synthesized pipeline deployed into the embedded emulator, a run on the `local`
# backend followed live, then a malformed dataset rejected.
demo: setup emulator
	$(BIN)/mtrl demo

# Figures printed next to their targets; `make bench B=wordle` runs only matching benchmarks.
bench: setup
	$(BIN)/python -m benchmarks $(B)

docs: setup
	$(BIN)/mtrl config docs > docs/configuration.md

# lambda.txt leaves the AWS SDK out (the layer takes runtime.txt's pins, see LAYER_SDK) so that the emulator
# environment, which pins its own botocore, can share lambda.txt.
RUNTIME_PROVIDED := boto3 botocore s3transfer urllib3
# PyPI's torch wheel depends on these CUDA packages; the CPU build that `pip install torch==2.13.0` takes does not.
CUDA_ONLY := cuda-bindings cuda-pathfinder cuda-toolkit triton nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc \
  nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse \
  nvidia-cusparselt-cu13 nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx
lock:
	cd requirements && ../$(BIN)/uv pip compile --python-version 3.11 --no-header --annotation-style line -q \
	  $(foreach p,$(RUNTIME_PROVIDED),--no-emit-package $(p)) lambda.in -o lambda.txt
	cd requirements && for f in runtime infra dev emulator; do \
	  ../$(BIN)/uv pip compile --python-version 3.11 --no-header --annotation-style line -q $$f.in -o $$f.txt; done
	cd requirements && ../$(BIN)/uv pip compile --python-version 3.11 --no-header --annotation-style line -q \
	  $(foreach p,$(CUDA_ONLY),--no-emit-package $(p)) llm.in -o llm.txt
	cd requirements && ../$(BIN)/uv pip compile --python-version 3.11 --no-header --annotation-style line -q \
	  --no-emit-package torch $(foreach p,$(CUDA_ONLY) cuda-cccl nvidia-cuda-cccl,--no-emit-package $(p)) verl.in -o verl.txt
	# The verl trainer image (docker/verl-trainer/Dockerfile): Python 3.11 on bookworm (glibc 2.36), with hashes.
	cd requirements && ../$(BIN)/uv pip compile --python-version 3.11 --python-platform x86_64-manylinux_2_36 \
	  --generate-hashes --no-header --annotation-style line -q verl-trainer.in -o verl-trainer.txt
	cd requirements && ../$(BIN)/uv pip compile --python-version 3.11 --python-platform x86_64-manylinux_2_36 \
	  --generate-hashes --no-header --annotation-style line -q verl-trainer-build.in -o verl-trainer-build.txt
	# The runner image's Python (docker/nova-runner/Dockerfile) is 3.12: the SDK requires it.
	cd requirements && ../$(BIN)/uv pip compile --python-version 3.12 --no-header --annotation-style line -q \
	  nova-runner.in -o nova-runner.txt
	# The sessions loop's image (docker/sessions-runner/Dockerfile): Python 3.12, like the reward worker's.
	cd requirements && ../$(BIN)/uv pip compile --python-version 3.12 --no-header --annotation-style line -q \
	  sessions-runner.in -o sessions-runner.txt

clean:
	rm -rf cdk.out .build .pytest_cache .mypy_cache .ruff_cache
