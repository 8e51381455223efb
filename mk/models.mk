# Models by name (issue 19 item 1): `make pull MODEL=owner/name` downloads a checkpoint once; plan, up and the
# service units then load that folder.

REVISION ?=

.PHONY: pull
pull: ## download MODEL (a Hugging Face id or a catalogued name; REVISION=...) once: size first, progress, resumable
	@test -n "$(MODEL)" || { echo "make pull needs MODEL=owner/name (a Hugging Face id) or a catalogued name" >&2; exit 64; }
	$(VRAMKIT) pull $(MODEL) $(if $(REVISION),--revision $(REVISION))
