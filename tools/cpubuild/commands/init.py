"""`cpubuild init DIR --name NAME [--template minimal|dot|torch] [--arch x86_64,aarch64] [--force]`:
a new project that works as written.

Writes a project from a template shipped in cpubuild/templates/<template>:
pyproject.toml ([tool.cpubuild], the cpubuild version provider), isa_matrix.toml
(variants of the arches asked for), CMakeLists.txt (cpubuild's CMake package),
kernels with one code path per variant, the Python package (`python -m NAME`,
selftest), a pytest file, a benchmark, a README and a .gitignore. `minimal`: one C
function behind a ctypes binding (replace two files to wrap your own). `dot` (the
default): float32 and int8 dot products with a code path per variant. `torch`:
vLLM-style ops (rms_norm, silu_and_mul) as a torch C++ extension, one per
variant, loaded through torch.ops. `--kind ctypes|torch` (older spelling) means
`--template dot|torch`.

NAME is the distribution name; the import package is NAME with '-' turned
into '_', the environment prefix (PREFIX_ISA) is the package upper-cased.
Everything is validated before anything is written: bad input exits 2 and
leaves DIR as it was.
"""

from __future__ import annotations

import keyword
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from .. import __version__
from ..errors import CpubuildError, UsageError
from ..hardware import hardware
from ..licenses import DEFAULT as DEFAULT_LICENSE
from ..licenses import license_text, spdx_expression
from ..runtime.select import env_names
from ..settings import split_list
from ..templates import DEFAULT_TEMPLATE, TEMPLATES, render, render_project, source_of

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

from ..contract import KINDS

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
    """`cpubuild>=X.Y,<X.(Y+1)`: the series of the cpubuild that wrote the project."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return f"cpubuild>={major}.{minor},<{major}.{minor + 1}"


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


@click.command(name="init")
@click.argument("directory", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--name", required=True, help="Distribution name; the import package is NAME with '-' -> '_'.")
@click.option("--template", type=click.Choice(tuple(TEMPLATES)), default=None,
              help=f"minimal: one C function behind a ctypes binding; dot: dot products with a code path per "
                   f"variant; torch: torch.ops extensions (needs torch to build). Default: {DEFAULT_TEMPLATE}.")
@click.option("--kind", type=click.Choice(KINDS), default=None,
              help="ctypes (= --template dot) or torch (= --template torch).")
@click.option("--arch", "arches", multiple=True, metavar="ARCH[,ARCH]",
              help=f"Arches to write variants for (default: {','.join(TEMPLATE_ARCHES)}).")
@click.option("--license", "license_id", default=DEFAULT_LICENSE, show_default=True, metavar="SPDX",
              help="SPDX licence expression for pyproject.toml; Apache-2.0 and MIT also get their text as LICENSE.")
@click.option("--force", is_flag=True, help="Write into a non-empty DIR (replacing files of the same names).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
def command(directory: Path, name: str, template: str | None, kind: str | None, arches: tuple[str, ...],
            license_id: str, force: bool, quiet: bool) -> None:
    """Create a new project in DIR: kernels, ISA variants, Python package, selftest, tests, README.

    The project builds as written: `cpubuild wheel --project DIR`, then
    install the wheel and run `pytest` in DIR (see its README.md).
    """
    names = project_names(name)
    chosen = parse_arches(arches or (",".join(TEMPLATE_ARCHES),))
    template = template_for(template, kind)
    kind = TEMPLATES[template][0]
    files = project_files(names, chosen, template, license_id)
    check_target(directory, files, force=force)
    write_files(directory, files)
    if quiet:
        return
    for rel in files:
        click.echo(f"wrote {directory / rel}")
    click.echo(f"\n{names.dist}: {kind} project ({template} template), package {names.package}, variants for {', '.join(chosen)}, "
               f"{env_names(names.prefix)[0]} forces a variant. Next:")
    click.echo(f"  cpubuild wheel --project {directory} --install python3" + ("    # against this Python's torch, or --torch X.Y.Z" if kind == "torch" else ""))
    click.echo(f"  python3 -m pip install pytest && (cd {directory} && python3 -m pytest)")
