# Local dashboard, Prometheus metrics and systemd units (issue 13).

# the dashboard's port; the README and docs/dashboard.md use 8003
DASHBOARD_PORT ?= 8003
# bind address; 127.0.0.1 keeps it local (set VRAMKIT_DASHBOARD_API_KEY before opening it wider)
DASHBOARD_HOST ?= 127.0.0.1
# --capture writes here on the GPU host (data, committed like the other GPU results); REPLAY=dir serves one
CAPTURE_DIR ?= benchmarks/results/gpu/dashboard-capture
REPLAY ?=
# panels dashboard-screenshots renders (default all four)
PANELS ?=
# extra flags, e.g. DASHBOARD_ARGS="--sglang-url http://127.0.0.1:30001"
DASHBOARD_ARGS ?=
# where install-service writes units; the user's own systemd by default (no root needed)
SERVICE_DIR ?= $(HOME)/.config/systemd/user
# planner/launch flags for the SGLang unit, e.g. SERVICE_ARGS="--gpu auto --model-path /models/qwen14b"
SERVICE_ARGS ?=

DASHBOARD = $(VRAMKIT) dashboard --host $(DASHBOARD_HOST) --port $(DASHBOARD_PORT) $(if $(REPLAY),--replay $(REPLAY)) $(DASHBOARD_ARGS)

.PHONY: dashboard dashboard-up dashboard-down dashboard-capture dashboard-screenshots install-service
dashboard: ## the dashboard in the foreground on 127.0.0.1:8003 (REPLAY=dir serves a capture)
	$(DASHBOARD)

dashboard-up: ## the dashboard in the background (pid + log in the kit's state dir); returns once it answers
	$(DASHBOARD) --background

dashboard-down: ## stop the background dashboard; its pid file and log go with it
	$(VRAMKIT) dashboard --stop

dashboard-capture: ## on a GPU host without a browser: every panel's JSON into CAPTURE_DIR (then REPLAY=it here)
	$(VRAMKIT) dashboard --capture $(CAPTURE_DIR) $(DASHBOARD_ARGS)

dashboard-screenshots: ## render docs/dashboard-*.png with headless chromium (REPLAY=dir PANELS="server live" from a capture)
	scripts/dashboard_screenshots.sh $(if $(REPLAY),--replay $(REPLAY)) $(if $(PANELS),--panels "$(PANELS)")

install-service: ## systemd units for native SGLang (PRESET: what start-qwen-PRESET RUNTIME=native runs; refused where it would be) and the embed service into SERVICE_DIR
	@# the same settings `make start-qwen-$(PRESET) RUNTIME=native` passes (mk/qwen.mk), so the unit runs what it would
	VRAMKIT_PORT=$(PORT) VRAMKIT_LOAD_FORMAT=$(LOAD_FORMAT) VRAMKIT_MODEL_PATH=$(MODEL_PATH) \
		VRAMKIT_SERVER_PYTHON=$(SERVER_PYTHON) $(if $(filter moe,$(PRESET)),VRAMKIT_KT_WEIGHT_PATH=$(KT_WEIGHT_PATH)) \
		$(VRAMKIT) install-service --dir $(SERVICE_DIR) --preset $(PRESET) $(if $(MODEL),--model $(MODEL)) \
		$(if $(CARD),--gpu $(CARD)) $(SERVICE_ARGS)
	@if command -v systemd-analyze >/dev/null; then \
		systemd-analyze verify $(SERVICE_DIR)/vramkit-sglang.service $(SERVICE_DIR)/vramkit-embed.service && echo "systemd-analyze verify: ok"; fi
