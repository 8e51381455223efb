# Set-up, tests, the planner and the committed compose files.

# Base interpreter for .venv (3.11+; the local CPU torch wheel on these machines is cp311)
PYTHON ?= python3
# kt-kernel, pinned once in config/versions.toml (kt_kernel_pip; kt_kernel_avx2_pip for AVX2-only CPUs)
KT_KERNEL := $(shell sed -n 's/^kt_kernel_pip = "\(.*\)"/\1/p' config/versions.toml)
KT_KERNEL_AVX2 := $(shell sed -n 's/^kt_kernel_avx2_pip = "\(.*\)"/\1/p' config/versions.toml)
# Preset `make setup` and `make plan` show by default
PRESET ?= optimized
# planner knobs for `make plan`, e.g. PLAN_ARGS="--gpu rtx-4090-24gb --context 65536"
PLAN_ARGS ?=

.PHONY: setup install setup-test-tools plan compose compose-check test test-unit clean
setup: install setup-sglang-check setup-test-tools setup-kt-test ## install everything (.venv, .venv-sglang, test tools), then print the default plan
	@# the plan is information here: a preset that does not fit this host (exit 10) does not fail the set-up
	-@$(VRAMKIT) plan --preset $(PRESET) $(PLAN_ARGS)

install: $(VENV)/.installed ## the kit's virtualenv: CPU torch (local wheel, else PyTorch's CPU index), then the kit
$(VENV)/.installed: pyproject.toml config/versions.toml scripts/install_cpu_torch.sh
	@# Python >= 3.11 and ~4 GiB of disk (CPU torch, the kit, its test tools): one line and its exit code if not
	@scripts/precheck.sh setup python $(PYTHON) 3.11 -- disk $(CURDIR) 4
	$(PYTHON) -m venv $(VENV)
	# torch first, the CPU build pinned in config/versions.toml: a local wheel, else PyTorch's CPU index.
	# Anything that wants torch later finds it satisfied, so no dependency can pull a CUDA build of several GB.
	scripts/install_cpu_torch.sh $(VENV) --with-deps
	$(VENV)/bin/pip install -q -e '.[embed,bench,dashboard,test]'
	$(VENV)/bin/pip install -q --no-deps gguf==0.19.0
	@# an editable install leaves the kit's own bytecode to its first import; compile it now, as pip does for a wheel
	$(PY) -m compileall -q vramkit
	@$(PY) -c "import torch, sys; v = torch.__version__; sys.exit(0 if v.endswith('+cpu') or not torch.cuda.is_available() else f'unexpected torch {v}')"
	touch $@

setup-test-tools: ## Debian tools the tests drive: chromium (dashboard), promtool (alert rules); apt-get only when missing and root
	scripts/setup_test_tools.sh

plan: ## what SGLang will allocate for PRESET on a 16 GB card, and what fits if it doesn't (PLAN_ARGS=...)
	@$(VRAMKIT) plan --preset $(PRESET) $(PLAN_ARGS)

compose: ## re-render docker-compose.qwen*.yml from config/ (commit the result)
	@$(VRAMKIT) compose

compose-check: ## fail if a committed compose file is stale
	@$(VRAMKIT) compose --check

# `make test` runs the tests on TEST_WORKERS pytest-xdist processes (0: one process, no xdist); tests/conftest.py
# keeps each expensive shared set-up (SGLang checker, embedding model, browser) in one of them. PYTEST_ARGS is
# passed on, e.g. PYTEST_ARGS="--durations=30" or PYTEST_ARGS="-k embed".
TEST_WORKERS ?= 2
PYTEST_ARGS ?=
PYTEST_N = $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS))

# kt-kernel (the hybrid MoE mode's CPU experts) only for tests/integration/test_kt_compat.py, so only `make test`
# installs it (the kit's own .venv does not need it; `make setup-kt-native` puts it into the GPU venv): --no-deps,
# its declared deps (triton, its CLI's helpers) are not needed to run its kernels; libhwloc for its extension
.PHONY: setup-kt-test
setup-kt-test: $(VENV)/.kt-test ## kt-kernel into .venv for tests/integration/test_kt_compat.py (make test runs it)
$(VENV)/.kt-test: $(VENV)/.installed config/versions.toml
	$(VENV)/bin/pip install -q --no-deps kt-kernel==$(KT_KERNEL)
	@# the AVX2-only CPUs' release beside it, in its own folder (test_kt_compat.py runs it with its avx2 build)
	rm -rf $(VENV)/kt-avx2 && $(VENV)/bin/pip install -q --no-deps --target $(VENV)/kt-avx2 kt-kernel==$(KT_KERNEL_AVX2)
	@ldconfig -p | grep -q libhwloc.so.15 || apt-get install -y -q libhwloc15 || \
		{ apt-get update -qq && apt-get install -y -q libhwloc15; } || \
		echo "warning: libhwloc15 missing: tests/integration/test_kt_compat.py will skip"
	touch $@

# `make lint` runs beside the tests, niced (a fresh clone's mypy takes 7-11 s of CPU: it runs while the test
# workers wait on servers and subprocesses, not in their place); its output follows the tests', and either
# failing fails `make test`. The tests run with bytecode caching on whatever the environment says
# (PYTHONDONTWRITEBYTECODE=1 made each worker rewrite every test module's asserts again: collection 21.6 s against
# 9.9 s with the cache on this 2-core machine); the caches are git-ignored __pycache__ folders.
test: install setup-sglang-check setup-test-tools setup-kt-test ## lint and every test that runs without a GPU: unit, integration (real Redis, model, SGLang parser, Compose)
	@lint_log=$$(mktemp); nice -n 10 $(MAKE) --no-print-directory lint >$$lint_log 2>&1 & lint_pid=$$!; \
	echo "$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_N) $(PYTEST_ARGS) tests   (make lint beside it)"; \
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_N) $(PYTEST_ARGS) tests; tests_rc=$$?; \
	wait $$lint_pid; lint_rc=$$?; cat $$lint_log; rm -f $$lint_log; \
	if [ $$lint_rc -ne 0 ]; then echo "make test: make lint failed (above)" >&2; exit 2; fi; exit $$tests_rc

test-unit: install ## unit tests only (no servers; the inner loop: seconds), on TEST_WORKERS processes too
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_N) $(PYTEST_ARGS) tests/unit

clean: ## remove virtualenvs and caches (not results)
	rm -rf $(VENV) .venv-sglang $(GPU_VENV) .pytest_cache
