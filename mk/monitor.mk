# VRAM monitor, vram-safe guard and host tuning (vramkit monitor / vram-safe / host).

# seconds between samples; 1 s costs little CPU and still catches a KV-cache ramp
INTERVAL ?= 1
# alert lines in percent, e.g. 80,90; empty = env VRAMKIT_ALERT_THRESHOLDS, else the issue's 85,90,95
THRESHOLDS ?=
# seconds before the same line on the same GPU alerts again: a value hovering at a line must not flood
COOLDOWN ?= 30
# sample log for vram-monitor; empty = no log (.csv -> CSV, anything else -> JSON lines)
LOG ?=
# vram-safe threshold: 12GiB or 75%; empty = the running preset's planned budget, else 75 %
THRESHOLD ?=
# GPU index or all
GPU ?= all
# extra flags, e.g. MONITOR_ARGS="--bell --duration 600" or HOST_ARGS="--pin 1234 --warmup"
MONITOR_ARGS ?=
HOST_ARGS ?=

.PHONY: vram-monitor vram-safe optimize optimize-write
vram-monitor: ## live VRAM screen per GPU with alerts and session stats (LOG=vram.csv to log samples)
	$(VRAMKIT) monitor --interval $(INTERVAL) --cooldown $(COOLDOWN) --gpu $(GPU) \
		$(if $(THRESHOLDS),--thresholds $(THRESHOLDS)) $(if $(LOG),--log $(LOG)) $(MONITOR_ARGS)

vram-safe: ## VRAM in use vs THRESHOLD, for a person (scripts: call `vramkit vram-safe`, 0 OK 1 WARN 2 CRIT 3 UNKNOWN)
	$(VRAMKIT) vram-safe --gpu $(GPU) $(if $(THRESHOLD),--threshold $(THRESHOLD))

optimize: ## host checks: CPU topology, proposed cpusets, memlock/pinned RAM, pinned copy speed, host read bandwidth
	$(VRAMKIT) host --bandwidth $(HOST_ARGS)

optimize-write: ## as optimize, and write the cpusets and VRAMKIT_HOST_READ_GBS (preset moe's planner input) into .env
	$(VRAMKIT) host --bandwidth --write $(HOST_ARGS)
