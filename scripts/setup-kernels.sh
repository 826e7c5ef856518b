#!/usr/bin/env bash
# Idempotent set-up for `make test-kernels` only (so that `make test` does not pay for it): what booting
# Debian's kernels under qemu needs, on top of scripts/setup.sh (the venv, and the bookworm-backports entry
# that carries the 6.12 kernel). The kernels themselves are fetched, cached, by capsule.sources.kernels.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash scripts/setup.sh

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# qemu-system-x86 boots the kernels (TCG), busybox-static is the initramfs, kmod's depmod writes the
# modules.dep the .deb lacks, zstd unpacks 6.12's vmlinuz
pkgs=(qemu-system-x86 busybox-static kmod zstd)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# the kernels are named through the machine's own indexes: make sure they know bookworm-backports
if ! apt-cache depends -t bookworm-backports linux-image-amd64 2>/dev/null | grep -q 'Depends: linux-image-6'; then
  as_root apt-get update -qq
fi
