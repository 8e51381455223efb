# The SGLang flag checker: a separate CPU-only environment with the pinned SGLang (config/versions.toml),
# used by tests/integration/test_sglang_parser.py and vramkit/adapters/sglang_check.py.

# Base interpreter for .venv-sglang: 3.11 because the local CPU torch wheel is cp311.
SGLANG_CHECK_PYTHON ?= python3.11

.PHONY: setup-sglang-check check-flags
setup-sglang-check: ## build .venv-sglang (CPU torch + pinned SGLang, no CUDA) for the real-parser checks
	@SGLANG_CHECK_PYTHON=$(SGLANG_CHECK_PYTHON) scripts/setup_sglang_check.sh .venv-sglang

check-flags: setup-sglang-check ## run every rendered launch and compose file through SGLang's parser and Compose
	$(PY) -m pytest -q -m sglang tests/integration/test_sglang_parser.py tests/integration/test_compose_valid.py
