# Benchmark a running SGLang server (vramkit bench) and compare saved results.

# the server to benchmark; empty = 127.0.0.1 at config/sglang.toml's port, where `make start-qwen*` serves
BENCH_URL ?=
# all suites by default; any of latency,concurrency,capacity,context,multiturn
BENCH_SUITES ?= latency,concurrency,capacity,context,multiturn
# name of the run in tables and plots; empty = derived from the server (model, KV dtype, fraction)
BENCH_LABEL ?=
# what ran it, stored with the result: speed figures on an emulated card are the host GPU's
DEVICE_LABEL ?=
# the planner's prediction (vramkit plan --json) to embed; its decode_tok_s_ceiling gives the roofline
PLANNER_JSON ?=
# token ids are drawn below this; 151000 stays under Qwen2.5's special tokens
BENCH_VOCAB ?= 151000
# extra flags, e.g. BENCH_ARGS=--quick or BENCH_ARGS="--sessions 12 --turns 4"
BENCH_ARGS ?=
# result JSONs for bench-compare, the first one is the baseline
RESULTS ?=

.PHONY: bench bench-quick bench-compare
bench: ## benchmark the running SGLang server -> benchmarks/results/*.json, .md, .png
	$(VRAMKIT) bench $(if $(BENCH_URL),--url $(BENCH_URL)) --suites $(BENCH_SUITES) --vocab-size $(BENCH_VOCAB) \
		$(if $(BENCH_LABEL),--label "$(BENCH_LABEL)") \
		$(if $(DEVICE_LABEL),--device-label "$(DEVICE_LABEL)") \
		$(if $(PLANNER_JSON),--planner-json $(PLANNER_JSON)) $(BENCH_ARGS)

bench-quick: ## the short variant of make bench (fewer repeats, shorter outputs)
	$(MAKE) bench BENCH_ARGS="--quick $(BENCH_ARGS)"

bench-compare: ## A/B table + plot of saved results: make bench-compare RESULTS="a.json b.json"
	@test -n "$(RESULTS)" || { echo 'make bench-compare: set RESULTS="a.json b.json" (first = baseline)'; exit 64; }
	$(VRAMKIT) bench --compare $(RESULTS) $(BENCH_ARGS)
