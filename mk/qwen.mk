# Start/stop the Qwen presets. Every start: plan -> checks -> start -> /health -> warm-up -> vram-safe.

# docker (default) or native (python -m sglang.launch_server in the background, pid + log in the state dir)
RUNTIME ?= docker
# the model; empty = the preset's own (config/presets.toml)
MODEL ?=
# a catalogued GPU to plan for; empty = the card NVML sees (auto), else the reference 16 GB card
CARD ?=
# host port for SGLang's API (bound to 127.0.0.1); empty = config/sglang.toml's port (SGLang's 30000)
PORT ?=
# 1/true/yes = print the plan, the checks and the exact commands, start nothing; 0/false/no/empty = start.
# Anything else is refused in one line (exit 64) before anything starts.
DRY_RUN ?=
# LOAD_FORMAT=dummy MODEL_PATH=<folder with config.json>: real shapes, random weights, no download; the plan
# is the folder's model (what SGLang loads), not the preset's
LOAD_FORMAT ?=
MODEL_PATH ?=
# seconds to wait for /health (a first GPTQ start compiles kernels for ~6 min)
TIMEOUT ?= 1200
UP_ARGS ?=

# the CLI reads its environment knobs as VRAMKIT_* (vramkit/launch/env.py)
_up = VRAMKIT_RUNTIME=$(RUNTIME) VRAMKIT_PORT=$(PORT) VRAMKIT_DRY_RUN='$(DRY_RUN)' VRAMKIT_LOAD_FORMAT=$(LOAD_FORMAT) \
	VRAMKIT_MODEL_PATH=$(MODEL_PATH) VRAMKIT_TIMEOUT=$(TIMEOUT) VRAMKIT_SERVER_PYTHON=$(SERVER_PYTHON) \
	$(VRAMKIT) up --preset $(1) --name vramkit-$(1) $(if $(MODEL),--model $(MODEL)) \
	$(if $(CARD),--gpu $(CARD)) $(UP_ARGS)
# after a real start, the guard: CRITICAL (2) or UNKNOWN (3) fails the target; WARNING (1) is printed and passes,
# but only when the line says WARNING: a Python that crashes also exits 1 (issue 20 item 7)
_safe = && { dry='$(DRY_RUN)'; [[ $${dry,,} =~ ^(1|true|yes)$$ ]] || { out=$$($(VRAMKIT) vram-safe); rc=$$?; \
	echo "$$out"; [[ $$rc == 0 || ( $$rc == 1 && $$out == "vram-safe: WARNING"* ) ]]; }; }

# preset moe: kt-kernel reads the CPU experts from KT_WEIGHT_PATH. The preset's AMXINT8 reads the folder
# `make kt-convert` writes once from the downloaded FP8 checkpoint (KT_CONVERT_PATH; converted, lossy: the plan
# says so). FP8 reads the checkpoint folder itself, no conversion (TTFT ~130 s for an 8K prompt, measured):
#   make start-qwen-moe KT_WEIGHT_PATH=$(MODEL_DIR) UP_ARGS="--kt-method FP8"
# the opt-in AMXINT4 (~27 % MoE-layer error): make kt-convert start-qwen-moe KT_METHOD=AMXINT4 UP_ARGS="--kt-method AMXINT4"
# the split instead of whole layers (the preset's default since): make start-qwen-moe UP_ARGS="--kt-gpu-layers off"
# a GPTQ-Int4 checkpoint (the fastest at 16 GB, measured 1.10x llama.cpp's decode): its CPU layers decode on its own
# int4 values (--kt-cpu-decode auto, a C compiler on the host), prompts of 1,024+ tokens on the GPU, and kt-kernel's
# RAWINT4, repacked from the same files without kt-kernel, takes the chunks in between (lossy there: -8 becomes -7):
#   make kt-convert start-qwen-moe KT_METHOD=RAWINT4 MODEL_DIR=<GPTQ folder> MODEL=<GPTQ folder> UP_ARGS="--kt-method RAWINT4"
# the token embeddings stay on the GPU (the moe and optimized presets move them to host RAM, auto):
#   make start-qwen-optimized UP_ARGS="--kt-embed-host off"
MODEL_DIR ?=
KT_METHOD ?= AMXINT8
KT_CONVERT_PATH ?= $(HOME)/.cache/vramkit/kt/qwen3-coder-30b-a3b-instruct-fp8-$(KT_METHOD)
KT_WEIGHT_PATH ?= $(KT_CONVERT_PATH)
# the Python of the native SGLang install, for `make kt-convert` and `make setup-kt-native` (kt-kernel goes there)
SERVER_PYTHON ?= python3
# the kt-kernel release for THIS CPU (config/versions.toml: kt_kernel_pip, or kt_kernel_avx2_pip on an AVX2-only
# CPU, whose avx2 build is the first that runs there); evaluated only by the targets that use it
KT_KERNEL_PIN = $(shell $(VENV)/bin/python -c "from vramkit.launch.hybrid import kt_kernel_here; print(kt_kernel_here())")

.PHONY: start-qwen stop-qwen start-qwen-optimized stop-qwen-optimized start-qwen-128k stop-qwen-128k status \
	start-qwen-moe stop-qwen-moe kt-convert setup-kt-native
start-qwen: ## baseline preset: fp16 KV, SGLang's own fraction
	@$(call _up,baseline) $(_safe)
stop-qwen: ## stop the baseline server
	@$(VRAMKIT) down --name vramkit-baseline
start-qwen-optimized: ## fp8 KV, measured fraction, host-RAM prefix cache
	@$(call _up,optimized) $(_safe)
stop-qwen-optimized: ## stop the optimized server
	@$(VRAMKIT) down --name vramkit-optimized
start-qwen-128k: ## one 131,072-token request (YaRN x4, fp8 KV; the 7B GPTQ on 16 GB, see config/presets.toml)
	@$(call _up,128k) $(_safe)
stop-qwen-128k: ## stop the 128k server
	@$(VRAMKIT) down --name vramkit-128k
start-qwen-moe: ## Qwen3-Coder-30B-A3B on 16 GB: experts split GPU / host RAM (KTransformers, AMXINT8 from KT_CONVERT_PATH: make kt-convert first; every expert in RAM: ~37 GiB)
	@$(if $(KT_WEIGHT_PATH),VRAMKIT_KT_WEIGHT_PATH=$(KT_WEIGHT_PATH) )$(call _up,moe) $(_safe)
stop-qwen-moe: ## stop the moe server
	@$(VRAMKIT) down --name vramkit-moe
kt-convert: ## the moe preset's CPU experts in KT's layout (KT_METHOD, default AMXINT8; lossy) into KT_CONVERT_PATH, from MODEL_DIR
	@# its preconditions, each one line and its exit code (scripts/precheck.sh): the checkpoint, a Python with torch,
	@# safetensors and kt-kernel (make setup-gpu, make setup-kt-native), a CPU kt-kernel quantizes on, disk for the
	@# experts (AMXINT8 27 GiB, AMXINT4 14 GiB), RAM for one layer at a time
	@scripts/precheck.sh kt-convert dir "$(MODEL_DIR)" config.json -- imports $(SERVER_PYTHON) torch safetensors kt_kernel \
		-- isa "amx_int8|avx512_bf16" -- disk $(dir $(KT_CONVERT_PATH)) $(if $(filter AMXINT4,$(KT_METHOD)),16,30) -- ram 8
	$(SERVER_PYTHON) tools/make_random_checkpoint.py config/models/qwen3-coder-30b-a3b-instruct $(KT_CONVERT_PATH) \
		--kt-layout $(KT_METHOD) --from $(MODEL_DIR) --kt-threads $$(nproc)
setup-kt-native: $(VENV)/.installed ## RUNTIME=native for preset moe: this CPU's kt-kernel (pinned, --no-deps) into SERVER_PYTHON's environment
	@scripts/precheck.sh setup-kt-native lib libhwloc.so.15 "libhwloc15 libnuma1" -- python $(SERVER_PYTHON) 3.10 \
		-- isa "avx2" -- disk $(CURDIR) 1
	$(SERVER_PYTHON) -m pip install --no-deps kt-kernel==$(KT_KERNEL_PIN)
	@# the adapter is put on the server's PYTHONPATH by `vramkit up` (services/sglang-kt/kt_compat)
	$(SERVER_PYTHON) -c "import sys; sys.path.insert(0, 'services/sglang-kt/kt_compat'); import vramkit_kt_compat as c; \
		c.install(); import kt_kernel; assert getattr(kt_kernel.KTMoEWrapper, '_vramkit_compat', False), 'the adapter did not patch kt_kernel'; \
		print('kt-kernel', kt_kernel.__version__, kt_kernel.__cpu_variant__, 'with the adapter: ok')"
status: ## what vramkit started, and whether it answers
	@$(VRAMKIT) status
