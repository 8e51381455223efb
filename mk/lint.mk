# Lint: ruff and mypy, configured in pyproject.toml ([tool.ruff], [tool.mypy]); `make test` runs it beside the tests
# (mk/core.mk), so CI does.

.PHONY: lint
lint: install ## ruff over the whole checkout, then mypy (strict on vramkit/core, default elsewhere: pyproject.toml)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
