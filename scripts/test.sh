#!/usr/bin/env bash
# The test command: set up this machine (idempotent), lint, build and install
# cpukern for this host, then run the whole pytest suite (unit, ops, dispatcher,
# QEMU CPU models, wheels, cross builds, index, images). Under CI=true a missing
# tool fails the run instead of skipping tests.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh

# The host first: a failure that depends on the CPU is recognisable from the log alone.
echo "== host"
grep -m1 "model name" /proc/cpuinfo || true
grep -m1 -E "^cpu family" /proc/cpuinfo || true
grep -m1 -E "^model\s" /proc/cpuinfo || true
grep -m1 -E "^(flags|Features)" /proc/cpuinfo || true
echo "cores: $(nproc), load: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 tools/tests/oracle.py || true

echo "== lint"
python3 -m ruff check python tools tests benchmarks examples
python3 -m mypy

echo "== build and install cpukern for this host"
export CCACHE_DIR=${CCACHE_DIR:-/var/cache/cpubuild/ccache}
mkdir -p "$CCACHE_DIR"
python3 -m pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps \
  -C build-dir=build/test-host . 2>&1 | grep -v -i "root user" || true
python3 -m cpukern

echo "== pytest"
mkdir -p build
set +e
# Two workers, one test file each at a time (module and session fixtures stay
# within a file's worker; builds lock their build directories, rootfs trees
# their cache): emulation, downloads and daemons wait on one core while the
# other compiles. PYTEST_WORKERS=0 runs everything in this process.
workers=${PYTEST_WORKERS:-2}
xdist=()
# --no-loadscope-reorder: files in collection order, which tools/tests/conftest.py
# makes longest first (xdist would order them by their number of tests).
[ "$workers" != 0 ] && xdist=(-n "$workers" --dist loadfile --no-loadscope-reorder)
python3 -m pytest "${xdist[@]}" --durations=30 --junitxml=build/pytest-junit.xml "$@"
rc=$?
set -e
python3 scripts/durations.py build/pytest-junit.xml || true
echo "test.sh: pytest exit $rc after $(( $(date +%s) - start )) s"
exit $rc
