# Lint: ruff, configured in pyproject.toml ([tool.ruff]); `make test` runs it first, so CI does.

.PHONY: lint
lint: install ## ruff over the whole checkout (rules and the pure core's banned imports: pyproject.toml)
	$(VENV)/bin/ruff check .
