# vramkit: `make help` lists every target. Knobs are VAR ?= default; override on the command line.
.DEFAULT_GOAL := help
SHELL := /bin/bash

VENV ?= .venv
PY ?= $(VENV)/bin/python
VRAMKIT ?= $(PY) -m vramkit
export PYTHONUNBUFFERED := 1

# Pieces of the kit keep their targets in mk/*.mk so each part reads on its own.
include $(sort $(wildcard mk/*.mk))

.PHONY: help
help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z0-9_.-]+:.*## /{printf "  \033[36m%-24s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)
