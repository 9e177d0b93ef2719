# Every check a contributor runs before pushing: `make check` (CI runs the README's test command,
# which runs the same checks as tests). Assumes `pip install -e ./trainer -e '.[dev]'`.
PYTHON ?= python

.PHONY: check format format-check lint types imports test

check: format-check lint types imports test

format:
	$(PYTHON) -m ruff format .

format-check:
	$(PYTHON) -m ruff format --check .

lint:
	$(PYTHON) -m ruff check .

types:
	$(PYTHON) scripts/typecheck.py

imports:
	lint-imports

test:
	$(PYTHON) -m pytest
