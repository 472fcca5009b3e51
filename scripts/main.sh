#!/usr/bin/env bash
# The main job: set up this machine, build the all-variant cpukern wheel for
# this host with cpubuild, install it into a fresh venv and show the variant
# the dispatcher picks (and why).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cpubuild wheel --out wheelhouse
wheel=$(ls -t wheelhouse/cpukern-*-manylinux*_x86_64.whl 2>/dev/null | head -n1 || true)
[ -n "$wheel" ] || wheel=$(ls -t wheelhouse/cpukern-*.whl | head -n1)
venv=${CPUKERN_VENV:-build/venv-main}
python3 -m uv venv -q --allow-existing "$venv"
python3 -m uv pip install -q --python "$venv/bin/python" --reinstall "$wheel" numpy ml_dtypes
echo "installed $wheel into $venv"
"$venv/bin/python" -m cpukern
