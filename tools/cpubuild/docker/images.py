"""`cpubuild image`: per-ISA, multi-arch container images of a project.

The Dockerfile is the project's docker/Dockerfile when it keeps one, else
cpubuild's template rendered for the project (docker/dockerfile.py). One
image per platform (and ISA set with --each-variant). The host's own platform
compiles the wheel in the image's build stage (with the very cpubuild that
runs here, whose wheel goes into the context); foreign platforms get a wheel
cross-compiled on the host (`cpubuild wheel --arch`) or given with --wheel,
so only image assembly and the smoke test run under QEMU. Bases are local
images only (`cpubuild base-image` makes them; nothing is pulled). Images of
torch projects also get the CPU torch their wheel is built against, fetched on
the host (docker/torchwheels.py) and unpacked by the build stage.
`--bake FILE` writes a buildx bake file for the same matrix instead.
"""

from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from ..errors import DockerError, UsageError
from ..hardware import Arch
from ..matrix import Matrix
from ..project import Project, find_project
from ..settings import split_list
from ..wheelbuild.merge import MergeError, merge_or_fail
from . import bake, dockerfile, isa_args, pin, plan
from .platforms import host_arch, parse_platforms, wheel_arch

BAKE_BASE = "debian:bookworm-slim"  # bake users have a registry
TORCH_MARK = "/opt/cpubuild-torch"  # where the template installs torch (an older Dockerfile lacks it)


@dataclass(frozen=True, kw_only=True)
class ImageProject:
    """The project an image is built from, and the Dockerfile it is built with."""

    project: Project
    matrix: Matrix
    dockerfile_path: str  # inside the build context
    dockerfile_text: str
    rendered: bool  # True: cpubuild's template (goes into .cpubuild/); False: the project's own

    @property
    def log_dir(self) -> Path:
        return self.project.root / "build" / "images"

    @property
    def package(self) -> str:
        return self.project.config.package


def load_image_project(project_dir: Path | None) -> ImageProject:
    project = find_project(project_dir)
    matrix = project.load_matrix()
    own = project.root / dockerfile.PROJECT_DOCKERFILE
    if own.is_file():
        text = own.read_text(encoding="utf-8")
        try:
            in_sync = isa_args.check_block(text, matrix)
        except isa_args.IsaArgsError as exc:
            raise DockerError(f"{own}: {exc}") from None
        if not in_sync:
            raise DockerError(
                f"{own}: its {isa_args.ARG_PREFIX}* build args are out of date with {matrix.path}",
                detail="fix: cpubuild image --sync-dockerfile",
            )
        if project.config.kind == "torch" and TORCH_MARK not in text:
            raise DockerError(
                f"{own}: this torch project's Dockerfile predates torch support (it never installs {TORCH_MARK})",
                detail="fix: move it aside and run cpubuild image --sync-dockerfile to write the current template, "
                       "then carry your changes over",
            )
        return ImageProject(project=project, matrix=matrix, dockerfile_path=dockerfile.PROJECT_DOCKERFILE,
                            dockerfile_text=text, rendered=False)
    text = dockerfile.render(project.config, matrix)
    return ImageProject(project=project, matrix=matrix, dockerfile_path=dockerfile.GENERATED_DOCKERFILE,
                        dockerfile_text=text, rendered=True)


def sync_dockerfile_of(project: Project, console: Console) -> None:
    """--sync-dockerfile: refresh the isa-args block of docker/Dockerfile, or write the rendered template there."""
    matrix = project.load_matrix()
    path = project.root / dockerfile.PROJECT_DOCKERFILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dockerfile.render(project.config, matrix), encoding="utf-8")
        console.print(f"wrote {path} (cpubuild's template for {project.config.dist_name}; adapt it freely outside the isa-args block)")
        return
    text = path.read_text(encoding="utf-8")
    try:
        synced = isa_args.sync_block(text, matrix)
    except isa_args.IsaArgsError as exc:
        raise DockerError(f"{path}: {exc}") from None
    if synced != text:
        path.write_text(synced, encoding="utf-8")
    console.print(f"{path}: {isa_args.ARG_PREFIX}* args {'updated' if synced != text else 'already in sync'}")


@dataclass(frozen=True, kw_only=True)
class Built:
    spec: plan.ImageSpec
    seconds: float
    steps: int
    cached_steps: int
    rebuilt: tuple[str, ...]
    size: int
    selected: str | None
    base_built: bool
    base_pinned: str  # the base's image ID the build used
    wheel_source: str  # "given", "merged" (several --wheel, partials), "cross-compiled" or "build stage"
    torch: str | None  # torch projects: the torch release installed in the image

    def to_json(self) -> dict[str, Any]:
        return {
            "tag": self.spec.tag,
            "platform": self.spec.platform,
            "target": self.spec.target,
            "isa": self.spec.label,
            "variants": list(self.spec.isas) if self.spec.isas else "all",
            "base": self.spec.base,
            "base_pinned": self.base_pinned,
            "wheel": self.spec.wheel.name if self.spec.wheel else None,
            "wheel_source": self.wheel_source,
            "torch": self.torch,
            "seconds": round(self.seconds, 2),
            "steps": self.steps,
            "cached_steps": self.cached_steps,
            "rebuilt": list(self.rebuilt),
            "size": self.size,
            "selected": self.selected,
        }


def _wheels_by_arch(matrix: Matrix, wheels: tuple[Path, ...]) -> dict[str, tuple[Path, tuple[Path, ...]]]:
    """arch -> (the wheel its image gets, the partials that wheel was merged from).
    Several --wheel for one platform are the partial wheels of a fanned-out build
    (docs/scale-out.md): merged here as `cpubuild merge` does, or refused in one line."""
    given: dict[str, list[Path]] = {}
    for wheel in wheels:
        if not wheel.is_file():
            raise UsageError(f"--wheel {wheel}: no such file")
        given.setdefault(wheel_arch(matrix.arches, wheel).name, []).append(wheel.resolve())
    out: dict[str, tuple[Path, tuple[Path, ...]]] = {}
    for name, paths in given.items():
        if len(paths) == 1:
            out[name] = (paths[0], ())
            continue
        merged_dir = Path(tempfile.mkdtemp(prefix="cpubuild-image-merge-"))
        atexit.register(shutil.rmtree, merged_dir, True)  # read into the build context before the command ends
        try:
            merged = merge_or_fail(paths, merged_dir)
        except MergeError as exc:
            raise UsageError(f"{len(paths)} wheels for {matrix.arches[name].docker_platform} are merged as partial "
                             f"wheels of one build, but: {exc.message}") from None
        out[name] = (merged.wheel, tuple(paths))
    return out


def _isa_sets(
    matrix: Matrix, arch: Arch, resolved: tuple[str, ...] | None, each_variant: bool
) -> list[tuple[str, ...] | None]:
    sets = [resolved]
    if each_variant:
        variants = matrix.variants_for(arch.name)
        baseline = variants[0].name
        for v in variants:
            single = (baseline,) if v.is_baseline else (baseline, v.name)
            if single != resolved and len(single) < len(variants):  # a full set is the `all` image
                sets.append(single)
    return sets


def make_specs(
    matrix: Matrix,
    *,
    isa: tuple[str, ...],
    platforms: tuple[str, ...],
    target: str,
    tag: str | None,
    base: str | None,
    wheels: tuple[Path, ...],
    each_variant: bool,
    default_base: Any,
    repository: str,
) -> list[plan.ImageSpec]:
    """The images to build (validates every input before anything runs)."""
    by_arch = _wheels_by_arch(matrix, wheels)
    if split_list(platforms):
        arches = parse_platforms(matrix.arches, platforms)
    elif by_arch:
        arches = [matrix.arches[name] for name in by_arch]
    else:
        arches = [host_arch(matrix.arches)]
    for name, (given, _) in by_arch.items():
        if matrix.arches[name] not in arches:
            raise UsageError(f"--wheel {given.name} is for {matrix.arches[name].docker_platform}, which --platform leaves out")
    explicit = bool(split_list(isa))
    resolved = plan.resolve_isas(matrix, arches, isa)
    if each_variant and by_arch:
        raise UsageError("--each-variant builds every variant in its own image; it cannot reuse a given --wheel")
    specs: list[plan.ImageSpec] = []
    per_arch = {a.name: _isa_sets(matrix, a, resolved[a.name], each_variant) for a in arches}
    sets_total = sum(len(s) for s in per_arch.values())
    for arch in arches:
        wheel, merged_from = by_arch.get(arch.name, (None, ()))
        for wanted in per_arch[arch.name]:
            isas = wanted if wheel is None else plan.check_wheel(matrix, arch, wheel, wanted, explicit)
            specs.append(
                plan.ImageSpec(
                    arch=arch,
                    isas=isas,
                    target=target,
                    tag=plan.image_tag(tag, repository=repository, target=target, arch=arch, isas=isas, several=sets_total > 1),
                    base=base or default_base(arch),
                    wheel=wheel,
                    merged_from=merged_from,
                )
            )
    tags = [s.tag for s in specs]
    if len(set(tags)) != len(tags):
        raise UsageError(f"--tag {tag} would name several images the same; leave it out for per-ISA tags")
    return specs


def _version_args(project: Project) -> dict[str, str]:
    """CPUBUILD_VERSION / SOURCE_DATE_EPOCH from git on the host (the context has no .git)."""
    try:
        version = project.source_version()
    except UsageError:
        return {}
    return {"CPUBUILD_VERSION": version.text, "SOURCE_DATE_EPOCH": str(version.source_date_epoch)}


def _cross_wheel(root: Path, spec: plan.ImageSpec, out: Path, console: Console, verbosity: int,
                 torch: str | None = None) -> Path:
    """Cross-compiles the wheel of a foreign platform on the host with `cpubuild wheel --arch`."""
    isa = "all" if spec.isas is None else ",".join(spec.isas)
    torch_args = ["--torch", torch] if torch else []
    cmd = [
        sys.executable,
        "-m",
        "cpubuild",
        "wheel",
        "--project",
        str(root),
        "--arch",
        spec.arch.name,
        "--isa",
        isa,
        "--out",
        str(out),
        *torch_args,
    ]
    console.print(f"cross-compiling the {spec.arch.name} wheel on the host: cpubuild wheel --arch {spec.arch.name} --isa {isa}"
                  + (f" --torch {torch}" if torch else ""))
    if verbosity >= 1:  # its own live log, on stderr (stdout may carry --json)
        proc = subprocess.run([*cmd, "-v"], stdout=sys.stderr, text=True, cwd=root)
        output = "(its log is above)"
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
        output = (proc.stdout + proc.stderr)[-3000:]
    wheels = sorted(out.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        raise DockerError(
            f"cross-compiling the {spec.arch.name} wheel for {spec.platform} failed",
            detail=output + f"\nfix: build it yourself and pass --wheel PATH (cpubuild wheel --arch {spec.arch.name})",
        )
    return wheels[0]


def _smoke(engine: Any, spec: plan.ImageSpec, package: str) -> str:
    """`python3 -m <package> --json` in the image: the variant its CPU selects."""
    result = engine.run(spec.tag, ["python3", "-m", package, "--json"], platform=spec.platform)
    try:
        report = json.loads(result.stdout)
        selected = report.get("selected")
    except ValueError:
        selected = None
    if result.exit_code != 0 or not selected:
        raise DockerError(
            f"smoke test of {spec.tag} ({spec.platform}) failed: python3 -m {package} exited {result.exit_code}",
            detail=(result.stdout + result.stderr)[-3000:],
        )
    return str(selected)


def _build_one(engine: Any, image: ImageProject, spec: plan.ImageSpec, opts: dict[str, Any], console: Console,
               verbosity: int) -> Built:
    from ..docker.progress import ConsoleProgress
    from ..emulate.rootfs import check_can_run
    from ..selfwheel import self_wheel
    from .base import base_tag, ensure_base_image, is_current
    from .context import build_context, generated_files

    matrix = image.matrix
    facts = spec.arch
    check_can_run(spec.arch.qemu)
    progress = ConsoleProgress(console, verbosity=verbosity, prefix=f"{spec.arch.debian_arch} ")
    base_built = False
    if spec.base == base_tag(facts):
        if not is_current(engine, facts):
            console.print(f"base image {spec.base} is missing or stale: building it from debootstrap (cached afterwards)")
            with progress.live(f"base image {spec.base}"):
                ensure_base_image(engine, facts, listener=progress, log=console.print, log_file=image.log_dir / "base.log")
            base_built = True
    else:
        data = pin.local_image(engine, pin.parse(spec.base))
        if data is None:
            raise UsageError(
                f"--base {spec.base} is not a local image; cpubuild never pulls",
                detail=f"fix: leave --base out (cpubuild makes {base_tag(facts)} from debootstrap), or load/pull {spec.base} yourself",
            )
        platform = f"{data.get('Os', 'linux')}/{data.get('Architecture', '?')}"
        if platform != spec.platform:
            raise UsageError(f"--base {spec.base} is {platform}, not {spec.platform}")
    pinned = pin.pin_local(engine, pin.parse(spec.base), spec.platform)
    if pinned is None:
        raise DockerError(f"the base image {spec.base} left the local image store during the build")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cpubuild-image-") as tmp:
        wheel = spec.wheel
        wheel_source = ("merged" if spec.merged_from else "given") if wheel is not None else "build stage"
        if wheel is None and spec.arch != host_arch(matrix.arches):
            wheel_source = "cross-compiled"
            wheel = _cross_wheel(image.project.root, spec, Path(tmp), console, verbosity, opts["torch"])
            spec = plan.ImageSpec(arch=spec.arch, isas=spec.isas, target=spec.target, tag=spec.tag, base=spec.base, wheel=wheel)
        # the torch named by the wheel's manifest; the build stage compiles against the one fetched
        torch = plan.wheel_torch(wheel) if wheel is not None else opts["torch"]
        torch_wheels = _torch_wheels(torch, spec, console) if torch else []
        tools = () if wheel else self_wheel().wheels
        generated = generated_files(
            dockerfile=dockerfile.with_base(image.dockerfile_text, pinned.image_id) if image.rendered else None, wheel=wheel,
            ca_certificates=opts["ca_certificates"], tool_wheels=tools, torch_wheels=torch_wheels,
            tool_requirements=_hashed(image, tools, torch_wheels) if tools else None,
        )
        context = build_context(image.project.root, generated)
        args = spec.build_args(matrix)
        args["CPUBUILD_BASE"] = pinned.image_id  # the base checked above, by digest: a retag cannot swap it
        args.update(opts["version_args"])
        mode = f"wheel {wheel.name}" if wheel else "compiling in the build stage"
        mode += f" (merged from {len(spec.merged_from)} partial wheels)" if spec.merged_from else ""
        mode += f", torch {torch}" if torch else ""
        console.print(f"building {spec.tag} ({spec.platform}, target {spec.target}, ISA {spec.label}, {mode})")
        safe = spec.tag.replace("/", "_").replace(":", "_")
        with context.file, progress.live(f"{spec.tag}"):
            result = engine.build(
                context=context.file,
                dockerfile=image.dockerfile_path,
                tag=spec.tag,
                platform=spec.platform,
                target=spec.target,
                buildargs=args,
                labels={"io.cpubuild.isa": spec.label, "io.cpubuild.platform": spec.platform,
                        "io.cpubuild.package": image.package},
                listener=progress,
                log_file=image.log_dir / f"{safe}.log",
                nocache=opts["no_cache"],
            )
        if opts["output"] is not None:
            _copy_wheels(engine, spec, Path(opts["output"]), console)
    seconds = time.monotonic() - start
    selected = _smoke(engine, spec, image.package) if spec.target != "build" and opts["smoke"] else None
    return Built(
        spec=spec,
        seconds=seconds,
        steps=result.steps,
        cached_steps=result.cached_steps,
        rebuilt=result.rebuilt,
        size=engine.image_size(spec.tag),
        selected=selected,
        base_built=base_built,
        base_pinned=pinned.image_id,
        wheel_source=wheel_source,
        torch=torch,
    )


def _hashed(image: ImageProject, tool_wheels: Sequence[Path], torch_wheels: list[Path]) -> str:
    """The build stage's requirements with hashes (docker/hashed.py), for the base's python3; with
    torch's own requirements for a torch project (its build checks them in the build venv)."""
    from .hashed import hashed_requirements, torch_requirements
    from .torchwheels import image_python

    return hashed_requirements(image.project.root, tool_wheels, python=image_python(),
                               also=torch_requirements(torch_wheels))


def _torch_wheels(version: str, spec: plan.ImageSpec, console: Console) -> list[Path]:
    """torch `version` and its dependencies for the image's platform and python3 (cached after the first fetch)."""
    from .torchwheels import image_python, torch_wheels

    wheels = torch_wheels(version, spec.arch, image_python(), log=console.print)
    size = sum(w.stat().st_size for w in wheels)
    console.print(f"torch {version} for {spec.platform}: {len(wheels)} wheels ({size / 1e6:.0f} MB) into the build context")
    return wheels


def torch_release(image: ImageProject, specs: list[plan.ImageSpec], requested: str | None) -> str | None:
    """The torch the build stage compiles against (torch projects; None otherwise): --torch,
    else this Python's (what `cpubuild wheel` builds against here). Checks given wheels against --torch."""
    from .. import torchdist

    if image.project.config.kind != "torch":
        if requested:
            raise UsageError(f"--torch {requested}: {image.project.config.dist_name} is not a torch project ([tool.cpubuild] kind = torch)")
        return None
    if requested is not None:
        torchdist.check_release(requested)
    for spec in specs:
        built = plan.wheel_torch(spec.wheel) if spec.wheel is not None else None
        if built and requested and not torchdist.same_release(built, requested):
            raise UsageError(f"--wheel {spec.wheel.name if spec.wheel else ''} is built against torch {built}, but --torch asks for {requested}")
    if requested is not None:
        return requested
    here = torchdist.installed_version()
    if here is None and any(s.wheel is None for s in specs):
        raise UsageError(f"{image.project.config.dist_name} is a torch project and {sys.executable} has no torch to follow: "
                         "pass --torch X.Y.Z (the release to build against and install in the image)")
    return torchdist.release(here) if here else None


def _copy_wheels(engine: Any, spec: plan.ImageSpec, out: Path, console: Console) -> None:
    """--output: the wheel the build stage made (the classic builder's stand-in for buildx --output)."""
    copied = engine.copy_out(spec.tag, "/wheels", out, suffix=".whl")
    for path in copied:
        console.print(f"wheel: {path}")


def _write_bake(image: ImageProject, specs: list[plan.ImageSpec], path: Path, console: Console,
                torch: str | None) -> dict[str, Any]:
    """The bake file, plus the `.cpubuild/` folder its targets read in the project directory (the bake context)."""
    from ..selfwheel import self_wheel
    from .context import GENERATED, generated_files

    torch_dirs: dict[str, str] = {}  # image tag -> its torch folder
    torch_files: dict[str, Path] = {}
    for spec in specs:
        version = plan.wheel_torch(spec.wheel) if spec.wheel is not None else torch
        if version:
            torch_dirs[spec.tag] = bake.torch_dir(spec, version)
            if not any(name.startswith(torch_dirs[spec.tag] + "/") for name in torch_files):
                for wheel in _torch_wheels(version, spec, console):
                    torch_files[f"{torch_dirs[spec.tag]}/{wheel.name}"] = wheel
    document = bake.bake_document(image.matrix, specs, dockerfile=image.dockerfile_path, torch=torch_dirs)
    bases = {s.base for s in specs}
    text = dockerfile.with_base(image.dockerfile_text, bases.pop()) if len(bases) == 1 else image.dockerfile_text
    problems = bake.validate(document, image.dockerfile_text)
    if problems:  # a generator bug, not a user mistake
        raise DockerError("the generated bake file is invalid", detail="\n".join(problems))
    folder = image.project.root / GENERATED
    shutil.rmtree(folder, ignore_errors=True)
    tools = self_wheel().wheels
    torch_wheels = [w for name, w in torch_files.items() if Path(name).name.startswith("torch-")]
    files = generated_files(dockerfile=text if image.rendered else None, wheel=None,
                            ca_certificates=[], tool_wheels=tools, tool_requirements=_hashed(image, tools, torch_wheels))
    files[str(GENERATED / ".gitignore")] = b"*\n"
    for spec in specs:
        if spec.wheel is not None:  # each target reads its own folder of the shared context
            files[f"{bake.wheel_dir(spec)}/{spec.wheel.name}"] = spec.wheel
    files.update(torch_files)
    for arcname, content in files.items():
        target = image.project.root / arcname
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            shutil.copyfile(content, target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return document


@dataclass(frozen=True, kw_only=True)
class Images:
    """What one `cpubuild image` run made: a bake file (document, its image target count) or built images."""

    bake_document: dict[str, Any] | None = None
    image_targets: int = 0
    built: tuple[Built, ...] = ()


def make_images(
    *,
    project_dir: Path | None,
    isa: tuple[str, ...],
    platforms: tuple[str, ...],
    target: str,
    tag: str | None,
    base: str | None,
    wheels: tuple[Path, ...],
    each_variant: bool,
    bake_file: Path | None,
    output: Path | None,
    host_ca: bool,
    torch: str | None,
    smoke: bool,
    no_cache: bool,
    console: Console,
    verbosity: int,
) -> Images:
    """The images of the project's matrix (or, with `bake_file`, the bake file for them)."""
    image = load_image_project(project_dir)
    matrix = image.matrix
    if output is not None and target != "build":
        raise UsageError("--output copies the wheel of the build stage: use it with --target build")
    from .base import base_tag

    ref = pin.parse(base) if base is not None else None  # a malformed --base: one line, before Docker
    if bake_file is not None:  # registry builders: pinned to a repo digest given or recorded, else the tag
        bake_base = ref or pin.parse(BAKE_BASE)
        base = None
    specs = make_specs(
        matrix,
        isa=isa,
        platforms=platforms,
        target=target,
        tag=tag,
        base=base,
        wheels=wheels,
        each_variant=each_variant,
        default_base=base_tag if bake_file is None else (lambda arch: pin.for_bake(bake_base, arch.docker_platform)),
        repository=image.project.config.wheel_name.replace("_", "-"),
    )
    torch_version = torch_release(image, specs, torch)
    if bake_file is not None:
        return Images(bake_document=_write_bake(image, specs, bake_file, console, torch_version), image_targets=len(specs))
    from .engine import Engine

    engine = Engine.connect()
    from .context import host_ca_certificates

    opts = {
        "no_cache": no_cache,
        "smoke": smoke,
        "output": output,
        "version_args": _version_args(image.project),
        "ca_certificates": host_ca_certificates() if host_ca else [],
        "torch": torch_version,
    }
    return Images(built=tuple(_build_one(engine, image, spec, opts, console, verbosity) for spec in specs))
