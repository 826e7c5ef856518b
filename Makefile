# The two entry points of the README. Each runs the idempotent set-up first (apt packages, .venv).
.PHONY: demo test setup lint

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/capsule demo

test: setup
	.venv/bin/python -m pytest -q -n 2 --dist loadfile

lint: setup
	.venv/bin/ruff check capsule tests
