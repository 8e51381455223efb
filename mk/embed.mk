# Embedding cache service for RAG (issue 3): FastAPI + Redis + sentence-transformers, CPU only.

# the service's port; README/curl examples and the compose file use 8002
EMBED_PORT ?= 8002
# embedded Redis data, pid file and log (git-ignored); `embed-down` reads the pid file from here
EMBED_DATA ?= .embed-data
# folders /precache/repo may read; default this checkout, so `vramkit embed precache .` works
EMBED_ROOTS ?= $(CURDIR)
# how the service is invoked; `vramkit embed` through the one CLI
EMBED_CLI ?= $(VRAMKIT) embed
# REDIS_URL (from the environment) points at any Redis; unset = the service starts an embedded valkey

.PHONY: embed-up embed-down embed-precache bench-embed bench-embed-faults test-embed
embed-up: ## start the embedding service on 127.0.0.1:8002 (EMBED_PORT) in the background (returns once /health answers)
	$(EMBED_CLI) up --port $(EMBED_PORT) --data-dir $(EMBED_DATA) --allowed-roots "$(EMBED_ROOTS)"

embed-down: ## stop the embedding service and the embedded Redis it started
	$(EMBED_CLI) down --data-dir $(EMBED_DATA)

embed-precache: ## embed this repository into the cache (progress bar): make embed-precache [REPO=path]
	$(EMBED_CLI) precache $(or $(REPO),$(CURDIR)) --url http://127.0.0.1:$(EMBED_PORT)

bench-embed: ## measure the embed cache (hits, batch 256, misses vs bare encode, precache x2) -> benchmarks/results/embed-cache.{json,md}
	HF_HUB_OFFLINE=1 $(PY) benchmarks/embed_bench.py

bench-embed-faults: ## cached-hit p99 during a maximal uncached request, time to heal after Redis is killed -> benchmarks/results/embed-faults.{json,md}
	HF_HUB_OFFLINE=1 $(PY) benchmarks/embed_faults_bench.py

test-embed: ## unit + integration tests of the embedding service (real valkey, real model)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q tests/unit/test_embed_*.py tests/integration/embed
