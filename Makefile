# The two entry points of the README. Each runs the idempotent set-up first (apt packages, .venv).
.PHONY: demo test test-unprivileged setup lint

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/capsule demo

test: setup
	.venv/bin/python -m pytest -q -n 2 --dist loadfile

# Every test not marked requires_bpf, run as `nobody`: proves the marker misses no test that needs the kernel.
test-unprivileged: setup
	bash tests/run_unprivileged.sh

# ruff over the code and the tests; mypy over capsule/ (its files and strictness are in pyproject.toml)
lint: setup
	.venv/bin/ruff check capsule tests
	.venv/bin/mypy
