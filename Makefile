# The two entry points of the README. Each runs the idempotent set-up first (apt packages, .venv).
# test-kernels is the third: the suite on other kernels, under qemu.
.PHONY: demo test test-unprivileged setup lint setup-kernels test-kernels test-kernels-smoke

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/capsule demo

test: setup
	.venv/bin/python -m pytest -q -n 2 --dist loadfile

# The suite inside Debian's 6.1 and 6.12 kernels, booted under qemu (docs/KERNELS.md); its own set-up step.
setup-kernels:
	@bash scripts/setup-kernels.sh

test-kernels: setup-kernels
	.venv/bin/python -m capsule.testing.vm --suite full --json .cache/kernels-report.json

# CI's short run: one boot of 6.1, the probes and a few kernel-layer tests (tests/testing/test_vm.py -m vm)
test-kernels-smoke: setup-kernels
	.venv/bin/python -m pytest -q tests/testing/test_vm.py -m vm

# Every test not marked requires_bpf, run as `nobody`: proves the marker misses no test that needs the kernel.
test-unprivileged: setup
	bash tests/run_unprivileged.sh

# ruff over the code and the tests; mypy over capsule/ (its files and strictness are in pyproject.toml)
lint: setup
	.venv/bin/ruff check capsule tests
	.venv/bin/mypy
