#!/usr/bin/env bash
# Run every test that needs no BPF as an unprivileged user, to prove the requires_bpf marker misses nothing
# (a test that reaches bpf(2) here gets EPERM and fails). Run as root: the user is `nobody`.
#
# nobody cannot read root's home or write the checkout, so the run works on copies under $WORK: the checkout
# (its .cache holds the test caches: spec-suite modules, built test programs) and capsule's build cache
# (~/.cache/capsule: built guests, soft-float objects, fetched third-party sources), with CAPSULE_CACHE, HOME and
# XDG_CACHE_HOME pointing into it. The .venv's interpreter may live where nobody can read (pyenv's, in /root):
# its runtime (binary, libpython, standard library) is copied too, and the .venv's packages are used in place
# through PYTHONPATH.
#
# Usage: tests/run_unprivileged.sh [pytest args...]   (default: -q -n 2 --dist loadfile)
set -euo pipefail

TOP=$(cd "$(dirname "$0")/.." && pwd)
RUN_AS=${RUN_AS:-nobody}
WORK=${WORK:-$(mktemp -d /tmp/capsule-unprivileged.XXXXXX)}
SRC_CACHE=${CAPSULE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/capsule}
VPY="$TOP/.venv/bin/python"
SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
BASE=$("$VPY" -c 'import sys; print(sys.base_prefix)')
VER=$("$VPY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

[ "$(id -u)" = 0 ] || { echo "run_unprivileged.sh: run as root (it runs the tests as $RUN_AS)" >&2; exit 2; }
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT

mkdir -p "$WORK/home/.cache" "$WORK/cache" "$WORK/src"
tar -C "$TOP" --exclude=./.venv --exclude=./.git -cf - . | tar -C "$WORK/src" -xf -
[ -d "$SRC_CACHE" ] && cp -a "$SRC_CACHE/." "$WORK/cache/"
mkdir -p "$WORK/py/bin" "$WORK/py/lib"
cp -a "$BASE/bin/python$VER" "$WORK/py/bin/"
cp -a "$BASE"/lib/libpython"$VER"*.so* "$WORK/py/lib/" 2>/dev/null || true
tar -C "$BASE/lib" --exclude="python$VER/site-packages" --exclude="python$VER/test" -cf - "python$VER" | tar -C "$WORK/py/lib" -xf -
chown -R "$RUN_AS" "$WORK"

args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-q -n 2 --dist loadfile)
cd "$WORK/src"
runuser -u "$RUN_AS" -- env -i PATH="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" HOME="$WORK/home" \
    XDG_CACHE_HOME="$WORK/home/.cache" CAPSULE_CACHE="$WORK/cache" LANG=C.UTF-8 PYTHONPATH="$WORK/src:$SITE" \
    PYTHONHOME="$WORK/py" LD_LIBRARY_PATH="$WORK/py/lib" "$WORK/py/bin/python$VER" -m pytest -p no:cacheprovider -m "not requires_bpf" "${args[@]}"
