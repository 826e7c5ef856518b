# The two entry points of the README. Each runs the idempotent set-up first (apt packages, .venv).
.PHONY: demo test setup lint

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/capsule demo

test: setup
	.venv/bin/python -m pytest -q -n 2 --dist loadfile

# ruff over the code and the tests; mypy over capsule/ (its files and strictness are in pyproject.toml)
lint: setup
	.venv/bin/ruff check capsule tests
	.venv/bin/mypy
