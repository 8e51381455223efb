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
# after a real start, the guard: CRITICAL (2) or UNKNOWN (3) fails the target; WARNING (1) is printed and passes
_safe = && { dry='$(DRY_RUN)'; [[ $${dry,,} =~ ^(1|true|yes)$$ ]] || $(VRAMKIT) vram-safe || [[ $$? == 1 ]]; }

.PHONY: start-qwen stop-qwen start-qwen-optimized stop-qwen-optimized start-qwen-128k stop-qwen-128k status
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
status: ## what vramkit started, and whether it answers
	@$(VRAMKIT) status
