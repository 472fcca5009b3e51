"""Local Debian base images from debootstrap: `FROM scratch` + the rootfs tar.

The tree comes from cpubuild.rootfs (debootstrap, cached and locked under
``<cache>/rootfs/<arch>-image``; the same cache `cpubuild test` uses, with
its own package set) and already holds python3 and tcmalloc, so image builds
on top of it need no apt-get at all. The image is tagged
``cpubuild/debian:<suite>-<debian arch>`` and labelled with a digest of what
it was made from; a base whose digest differs is rebuilt. The image ID of the
base built or reused is recorded (docker/pin.py) and is what image builds pin.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..emulate.rootfs import DEFAULT_SUITE, STAMP, Log, RootfsSpec, check_can_run, ensure_rootfs
from ..errors import BuildFailedError
from ..hardware import Arch
from .buildlog import Listener
from .context import single_file_context
from .engine import Engine
from .pin import parse, pin_local

REPOSITORY = "cpubuild/debian"
PACKAGES = ("python3", "libtcmalloc-minimal4")
FLAVOR = "image"
LABEL_DIGEST = "io.cpubuild.base.digest"
DOCKERFILE = Path(__file__).with_name("Dockerfile.base")
# Left out of the image: apt's indexes and caches, docs (copyright files are put
# back), man pages, translations, and cpubuild's own bookkeeping in the tree.
EXCLUDES = (
    "./var/lib/apt/lists/*",
    "./var/cache/apt/*",
    "./var/cache/debconf/*-old",
    "./var/log/*",
    "./usr/share/doc/*",
    "./usr/share/man/*",
    "./usr/share/info/*",
    "./usr/share/locale/*",
    "./opt/cpubuild-run",
    f"./{STAMP}",
)


@dataclass(frozen=True, kw_only=True)
class BaseImage:
    tag: str
    platform: str
    built: bool  # False: the local image was current and reused
    seconds: float
    size: int
    image_id: str  # sha256:<hex>: what `cpubuild image` pins its builds to


def base_tag(arch: Arch, suite: str = DEFAULT_SUITE) -> str:
    return f"{REPOSITORY}:{suite}-{arch.debian_arch}"


def rootfs_spec(arch: Arch) -> RootfsSpec:
    return RootfsSpec.for_arch(arch, packages=PACKAGES, flavor=FLAVOR)


def digest(arch: Arch) -> str:
    """What the image is made from: the tree's stamp, the trimming, the Dockerfile."""
    recipe = {
        "rootfs": rootfs_spec(arch).stamp(),
        "excludes": list(EXCLUDES),
        "dockerfile": DOCKERFILE.read_text(encoding="utf-8"),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def is_current(engine: Engine, arch: Arch, tag: str | None = None) -> bool:
    data = engine.image(tag or base_tag(arch))
    if data is None:
        return False
    labels = (data.get("Config") or {}).get("Labels") or {}
    return bool(data.get("Architecture") == arch.docker_platform.split("/")[1] and labels.get(LABEL_DIGEST) == digest(arch))


def _rootfs_tar(root: Path, out: Path) -> None:
    cmd = ["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(out)]
    cmd += [f"--exclude={pattern}" for pattern in EXCLUDES]
    # The tree's own directory is a private temp dir (mode 0700): pack what is in it,
    # not the directory itself, so the image's / keeps the daemon's 0755.
    entries = sorted(f"./{p.name}" for p in root.iterdir())
    proc = subprocess.run([*cmd, *entries], capture_output=True, text=True)
    if proc.returncode == 0:
        copyrights = sorted(p.relative_to(root) for p in (root / "usr/share/doc").glob("*/copyright"))
        if copyrights:
            proc = subprocess.run(
                ["tar", "--numeric-owner", "-C", str(root), "-rf", str(out), *[f"./{p}" for p in copyrights]],
                capture_output=True,
                text=True,
            )
    if proc.returncode != 0:
        raise BuildFailedError(f"packing the rootfs {root} failed", detail=proc.stderr[-2000:])


def ensure_base_image(
    engine: Engine,
    arch: Arch,
    *,
    force: bool = False,
    listener: Listener | None = None,
    log: Log = print,
    log_file: Path | None = None,
) -> BaseImage:
    """The current base image of `arch`, built now when missing or stale."""
    tag = base_tag(arch)
    start = time.monotonic()
    if not force and is_current(engine, arch, tag):
        return BaseImage(tag=tag, platform=arch.docker_platform, built=False, seconds=0.0, size=engine.image_size(tag),
                         image_id=_pinned(engine, tag, arch))
    check_can_run(arch.qemu)
    root = ensure_rootfs(rootfs_spec(arch), log=log)
    with tempfile.TemporaryDirectory(prefix="cpubuild-base-") as tmp:
        rootfs_tar = Path(tmp) / "rootfs.tar"
        log(f"base-image: packing {root} for {arch.docker_platform}")
        _rootfs_tar(root, rootfs_tar)
        context = single_file_context({"Dockerfile": DOCKERFILE, "rootfs.tar": rootfs_tar})
        with context.file:
            engine.build(
                context=context.file,
                dockerfile="Dockerfile",
                tag=tag,
                platform=arch.docker_platform,
                labels={
                    LABEL_DIGEST: digest(arch),
                    "io.cpubuild.base.packages": ",".join(PACKAGES),
                    "org.opencontainers.image.title": f"Debian {DEFAULT_SUITE} ({arch.debian_arch}) from debootstrap",
                },
                listener=listener,
                log_file=log_file,
                what="base image",
            )
    return BaseImage(tag=tag, platform=arch.docker_platform, built=True, seconds=time.monotonic() - start,
                     size=engine.image_size(tag), image_id=_pinned(engine, tag, arch))


def _pinned(engine: Engine, tag: str, arch: Arch) -> str:
    """The base's image ID, recorded for later builds (docker/pin.py)."""
    pin = pin_local(engine, parse(tag), arch.docker_platform)
    if pin is None:
        raise BuildFailedError(f"the base image {tag} is not in the local image store after building it")
    return pin.image_id
