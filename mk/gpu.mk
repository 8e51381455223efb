# The GPU host: `make setup-gpu` builds the virtualenv RUNTIME=native starts SGLang from, `make test-gpu`
# runs the real-GPU tests. Neither can do anything useful on a machine without an NVIDIA GPU, and both say so.

# the GPU host's virtualenv: the pinned SGLang (config/versions.toml) with the CUDA torch it pins
GPU_VENV ?= .venv-gpu
# its base interpreter, >= 3.11 (the kit's floor; SGLang's is 3.10)
GPU_PYTHON ?= python3
# the interpreter `vramkit up --runtime native` starts SGLang with; passed as VRAMKIT_SERVER_PYTHON
SERVER_PYTHON ?= $(or $(VRAMKIT_SERVER_PYTHON),$(GPU_VENV)/bin/python)
# test-gpu's interpreter: GPU_VENV's (CUDA torch) once setup-gpu made it, else .venv's (CPU torch: on a host
# with a GPU the tests then FAIL and say to run make setup-gpu; without a GPU they skip with the reason)
GPU_TEST_PY ?= $(if $(wildcard $(GPU_VENV)/bin/python),$(GPU_VENV)/bin/python,$(PY))

.PHONY: setup-gpu test-gpu
setup-gpu: ## on a GPU host: GPU_VENV (.venv-gpu) with the pinned SGLang + its CUDA torch, for RUNTIME=native
	@# ~15 GiB of disk: the pinned SGLang and its CUDA torch (the script below checks the interpreter, GPU, driver)
	@scripts/precheck.sh setup-gpu disk $(CURDIR) 15
	@GPU_PYTHON=$(GPU_PYTHON) scripts/setup_gpu.sh $(GPU_VENV)

test-gpu: ## real-GPU tests; fail if an NVIDIA GPU is here and torch cannot use it, skip (with why) if none
	VRAMKIT_GPU_TESTS=1 $(GPU_TEST_PY) -m pytest -q -p no:cacheprovider -rs -m gpu tests/gpu
