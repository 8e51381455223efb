# Set-up, tests, the planner and the committed compose files.

# Base interpreter for .venv (3.11+; the local CPU torch wheel on these machines is cp311)
PYTHON ?= python3
# the CPU torch wheel, pinned once in config/versions.toml (torch_cpu)
TORCH_CPU := $(shell sed -n 's/^torch_cpu = "\(.*\)"/\1/p' config/versions.toml)
# kt-kernel, pinned once in config/versions.toml (kt_kernel_pip)
KT_KERNEL := $(shell sed -n 's/^kt_kernel_pip = "\(.*\)"/\1/p' config/versions.toml)
# Preset `make setup` and `make plan` show by default
PRESET ?= optimized
# planner knobs for `make plan`, e.g. PLAN_ARGS="--gpu rtx-4090-24gb --context 65536"
PLAN_ARGS ?=

.PHONY: setup install plan compose compose-check test test-unit test-gpu clean
setup: install setup-sglang-check ## install everything (.venv, .venv-sglang), then print the default plan
	@# the plan is information here: a preset that does not fit this host (exit 10) does not fail the set-up
	-@$(VRAMKIT) plan --preset $(PRESET) $(PLAN_ARGS)

install: $(VENV)/.installed ## the kit's virtualenv: CPU torch from the local wheel first, then the kit
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first, pinned: the local CPU wheel. Anything that wants torch later finds it satisfied,
	# so no dependency can pull a CUDA build of several GB.
	$(VENV)/bin/pip install -q torch==$(TORCH_CPU)
	$(VENV)/bin/pip install -q -e '.[embed,bench,test]'
	# kt-kernel (the hybrid MoE mode's CPU experts) for tests/integration/test_kt_compat.py: --no-deps, its
	# declared deps (triton, its CLI's helpers) are not needed to run its kernels; libhwloc for its extension
	$(VENV)/bin/pip install -q --no-deps kt-kernel==$(KT_KERNEL) gguf==0.19.0
	@ldconfig -p | grep -q libhwloc.so.15 || apt-get install -y -q libhwloc15 || \
		echo "warning: libhwloc15 missing: tests/integration/test_kt_compat.py will skip"
	@$(PY) -c "import torch, sys; v = torch.__version__; sys.exit(0 if v.endswith('+cpu') or not torch.cuda.is_available() else f'unexpected torch {v}')"
	touch $@

plan: ## what SGLang will allocate for PRESET on a 16 GB card, and what fits if it doesn't (PLAN_ARGS=...)
	@$(VRAMKIT) plan --preset $(PRESET) $(PLAN_ARGS)

compose: ## re-render docker-compose.qwen*.yml from config/ (commit the result)
	@$(VRAMKIT) compose

compose-check: ## fail if a committed compose file is stale
	@$(VRAMKIT) compose --check

test: install setup-sglang-check lint ## lint, then every test that runs without a GPU: unit, integration (real Redis, model, SGLang parser, Compose)
	$(PY) -m pytest -q -p no:cacheprovider tests

test-unit: install ## unit tests only (no servers, seconds)
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

test-gpu: ## GPU tests on a GPU host (VRAMKIT_GPU_TESTS=1)
	VRAMKIT_GPU_TESTS=1 $(PY) -m pytest -q -m gpu tests/gpu

clean: ## remove virtualenvs and caches (not results)
	rm -rf $(VENV) .venv-sglang .pytest_cache
