"""What `cpubuild init` writes: the project's names, the files of a template
(rendered from cpubuild/templates/<template>), and writing them only when the
whole set is valid and DIR can take it (bad input exits 2, DIR as it was)."""

from __future__ import annotations

import keyword
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from . import __version__
from .errors import CpubuildError, UsageError
from .hardware import hardware
from .licenses import DEFAULT as DEFAULT_LICENSE
from .licenses import license_text, spdx_expression
from .settings import split_list
from .templates import DEFAULT_TEMPLATE, TEMPLATES, render, render_project, source_of

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib


# Arches the template has variants and kernel code paths for, in the order files list them.
TEMPLATE_ARCHES = ("x86_64", "aarch64")
# PEP 508 distribution names
DIST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
# Names whose package would shadow what the build or the package itself imports.
RESERVED = ("cpubuild", "scikit_build_core", "pytest", "torch")


@dataclass(frozen=True, kw_only=True)
class Names:
    """What a project called NAME is called in each place."""

    dist: str  # [project] name
    package: str  # import package, C symbol and CMake target prefix
    prefix: str  # <PREFIX>_ISA, <PREFIX>_VARIANT_<NAME>
    wheel_name: str  # the distribution name as wheel file names spell it


def project_names(name: str) -> Names:
    """Validates NAME; raises UsageError (one line) when it cannot name a project."""
    if not DIST_NAME.match(name):
        raise UsageError(f"--name {name!r}: not a distribution name (ASCII letters, digits, '-' and '_', "
                         "starting and ending with a letter or digit)")
    package = name.replace("-", "_")
    if not package.isascii() or not package.isidentifier() or not package[0].isalpha():
        raise UsageError(f"--name {name!r}: {package!r} is not a Python package name "
                         "(letters, digits, '-' and '_', starting with a letter)")
    if keyword.iskeyword(package):
        raise UsageError(f"--name {name!r}: {package!r} is a Python keyword")
    if package in sys.stdlib_module_names or package.lower() in RESERVED:
        raise UsageError(f"--name {name!r}: the package {package!r} would shadow the module of that name; choose another")
    return Names(dist=name, package=package, prefix=package.upper(), wheel_name=re.sub(r"[-_.]+", "_", name).lower())


def parse_arches(values: tuple[str, ...]) -> tuple[str, ...]:
    """`--arch x86_64,aarch64` (repeatable, aliases accepted) -> template arches, in file order."""
    wanted: set[str] = set()
    for word in split_list(values):
        arch = hardware().resolve_arch(word)
        if arch not in TEMPLATE_ARCHES:
            raise UsageError(f"--arch {word}: cpubuild init has no template for {arch} "
                             f"(it writes {', '.join(TEMPLATE_ARCHES)}; add {arch} variants to isa_matrix.toml yourself)")
        wanted.add(arch)
    if not wanted:
        raise UsageError(f"--arch: name at least one arch ({', '.join(TEMPLATE_ARCHES)})")
    return tuple(a for a in TEMPLATE_ARCHES if a in wanted)


def cpubuild_requirement(version: str = __version__) -> str:
    """`cpubuild-core>=X.Y,<X.(Y+1)`: the series of the cpubuild that wrote the project.
    cpubuild-core, not cpubuild: an isolated build needs only its files, not the CLI's dependencies."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return f"cpubuild-core>={major}.{minor},<{major}.{minor + 1}"


def variant_summary(matrix_text: str) -> str:
    """`x86_64: baseline, avx2, avx512; aarch64: ...` from a rendered matrix."""
    per_arch: dict[str, list[str]] = {}
    for v in tomllib.loads(matrix_text).get("variant", []):  # the template names every variant's arch
        per_arch.setdefault(str(v["arch"]), []).append(str(v["name"]))
    return "; ".join(f"{arch}: {', '.join(names)}" for arch, names in per_arch.items())


def template_for(template: str | None, kind: str | None) -> str:
    """--template, or the template --kind names (ctypes: dot); both must agree."""
    by_kind = {"ctypes": "dot", "torch": "torch"}
    if template is not None and kind is not None and TEMPLATES[template][0] != kind:
        raise UsageError(f"--kind {kind} and --template {template} disagree ({template} writes a "
                         f"{TEMPLATES[template][0]} project); pass only --template")
    return template or (by_kind[kind] if kind else DEFAULT_TEMPLATE)


def project_files(names: Names, arches: tuple[str, ...], template: str = DEFAULT_TEMPLATE,
                  license: str = DEFAULT_LICENSE) -> dict[str, str]:
    """Relative path -> content of every file of the new project (LICENSE for the ids cpubuild has a text for)."""
    expression = spdx_expression(license)
    text = license_text(expression, holder=f"The {names.dist} authors")
    values = {
        "license": expression,
        "name": names.dist,
        "package": names.package,
        "prefix": names.prefix,
        "wheel_name": names.wheel_name,
        "cpubuild_requirement": cpubuild_requirement(),
        "description": TEMPLATES[template][1],
    }
    flags = {arch: arch in arches for arch in TEMPLATE_ARCHES} | {"license_file": text is not None}
    values["variant_list"] = variant_summary(render(source_of(template, "isa_matrix.toml"), values, flags))
    files = render_project(template, values, flags)
    if text is not None:
        files["LICENSE"] = text
    return files


def check_target(directory: Path, files: dict[str, str], *, force: bool) -> None:
    """DIR must be new, empty, or --force; no file to write may be a directory."""
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} exists and is not a directory")
    if directory.is_dir() and any(directory.iterdir()) and not force:
        raise UsageError(f"{directory} is not empty; pass --force to write the project into it "
                         "(files of the same names are replaced)")
    for rel in files:
        if (directory / rel).is_dir():
            raise UsageError(f"{directory / rel} is a directory, in the way of the file {rel}")
        for parent in Path(rel).parents[:-1]:  # src/pkg, src (not DIR itself)
            if (directory / parent).exists() and not (directory / parent).is_dir():
                raise UsageError(f"{directory / parent} is a file, in the way of the directory {parent}")


def write_files(directory: Path, files: dict[str, str]) -> None:
    try:
        for rel, text in files.items():
            path = directory / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="\n")
    except OSError as exc:
        raise CpubuildError(f"cannot write {exc.filename or directory}: {exc.strerror or exc}") from None


