# The two entry points of the README. Each runs the idempotent set-up first (apt packages, .venv).
# test-kernels is the third: the suite on other kernels, under qemu.
.PHONY: demo test setup lint setup-kernels test-kernels

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

lint: setup
	.venv/bin/ruff check capsule tests
