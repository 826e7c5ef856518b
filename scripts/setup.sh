#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine (root): system packages, then the
# project's virtual environment at .venv with capsule installed in editable mode.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

stamp=.venv/.setup-done
want="$(sha256sum scripts/setup.sh pyproject.toml | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# bookworm-backports carries bpftool 7.5 and libbpf 1.4 (the bookworm ones cannot load
# arena objects). Derive the entry from the machine's own sources rather than naming a mirror.
bp=/etc/apt/sources.list.d/capsule-backports.sources
if [ ! -f "$bp" ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
  uris=$(awk '/^URIs:/ && !/security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  printf 'Types: deb deb-src\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$uris" | as_root tee "$bp" >/dev/null
  as_root apt-get update -qq
fi

pkgs=(clang-19 lld-19 llvm-19 wabt libc6-dev wasi-libc libclang-rt-19-dev-wasm32
      libc++-19-dev-wasm32 libc++abi-19-dev-wasm32 iproute2 csmith libcsmith-dev gcc-multilib creduce)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
bpmissing=()
for p in bpftool libbpf-dev; do
  v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)
  case "$v" in *bpo*) ;; *) bpmissing+=("$p") ;; esac
done
if [ ${#missing[@]} -gt 0 ] || [ ${#bpmissing[@]} -gt 0 ]; then
  [ -n "$(ls /var/lib/apt/lists/ 2>/dev/null | grep -i backports)" ] || as_root apt-get update -qq
  export DEBIAN_FRONTEND=noninteractive
  [ ${#missing[@]} -eq 0 ] || as_root apt-get install -y -qq "${missing[@]}" >/dev/null
  [ ${#bpmissing[@]} -eq 0 ] || as_root apt-get install -y -qq -t bookworm-backports "${bpmissing[@]}" >/dev/null
fi

# bpffs is where pinned objects would live; mount it if the machine has not.
mountpoint -q /sys/fs/bpf 2>/dev/null || as_root mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[dev]'
echo "$want" > "$stamp"
