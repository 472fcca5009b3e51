#!/usr/bin/env bash
# The test command: set up this machine (idempotent), lint, build and install
# cpukern for this host, then run the whole pytest suite (unit, ops, dispatcher,
# QEMU CPU models, wheels, cross builds, index, images). Under CI=true a missing
# tool fails the run instead of skipping tests.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh

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
set +e
python3 -m pytest "$@"
rc=$?
set -e
echo "test.sh: pytest exit $rc after $(( $(date +%s) - start )) s"
exit $rc
