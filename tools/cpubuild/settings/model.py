"""Every setting of ``[tool.cpubuild]``, declared once.

Each table is a frozen dataclass; each field carries its type (the
annotation), default, help text and checks (``setting(...)``). The TOML key
is the field name with '-' for '_', the environment variable of a layered
table is its ``env_prefix`` + ``<FIELD>`` (``CPUBUILD_<FIELD>`` for the wheel
table), the option ``--<key>``. The reader
(reader.py), the JSON schema and docs tables (generate.py) and the click
options (clickopts.py) are all derived from here. Standard library only:
the CMake bridge reads the contract inside isolated builds.
"""

# ruff: noqa: RUF009  (setting() and table() are this model's field specifiers: they return dataclasses.field)

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE = r"[A-Za-z_][A-Za-z0-9_]*"
PREFIX = r"[A-Z][A-Z0-9_]*"
C_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
VARIANT = r"[a-z][a-z0-9_]*"  # a variant name of isa_matrix.toml (also 'all', 'native')
CONFIG_SETTING = r"[^=\s]+=.*"
FRONTENDS = ("auto", "build", "uv", "pip")  # auto: uv when installed (faster), else build
SWITCHES = ("auto", "on", "off")
KINDS = ("ctypes", "torch")
DEFAULT_MATRIX = "isa_matrix.toml"
ENV_PREFIX = "CPUBUILD_"


def setting(
    default: Any,
    help: str,
    *,
    choices: tuple[str, ...] = (),
    pattern: str | None = None,
    nonempty: bool = False,
    minimum: int | None = None,
    problem: str | None = None,
    flags: tuple[str, ...] = (),
    metavar: str | None = None,
    default_text: str | None = None,
    comma_list: bool = False,
    record_keys: tuple[str, ...] = (),
    record_required: tuple[str, ...] = (),
) -> Any:
    """A field of a settings table. `problem` (with {value!r}) replaces the generic
    message for any bad value; `flags` overrides the option spelling; `comma_list`:
    a string is also accepted and split at commas (lists only)."""
    meta = {"help": help, "choices": choices, "pattern": pattern, "nonempty": nonempty, "minimum": minimum,
            "problem": problem, "flags": flags, "metavar": metavar, "default_text": default_text,
            "comma_list": comma_list, "record_keys": record_keys, "record_required": record_required}
    if isinstance(default, (list, dict)):
        raise TypeError("mutable defaults: use a tuple")
    return dataclasses.field(default=default, metadata=meta)


def table(help: str, cls: type) -> Any:
    return dataclasses.field(default_factory=cls, metadata={"help": help, "table": cls})


@dataclass(frozen=True, kw_only=True)
class WheelSettings:
    """[tool.cpubuild.wheel]: defaults of `cpubuild wheel` (CPUBUILD_* and the command line override)."""

    layered = True  # class attribute: environment variables and options apply

    isa: tuple[str, ...] = setting(
        (), "Variants to include (repeatable, comma-separated): names from isa_matrix.toml, 'all' (default: every "
            "variant of the arch) or 'native' (the best this host runs). The baseline (or the arch's floor) is "
            "always included, except a floor in a --partial build.",
        # any case and ';' (a CMake list) as before: the plan lower-cases and splits them
        pattern=r"[A-Za-z][A-Za-z0-9_]*(;[A-Za-z][A-Za-z0-9_]*)*", comma_list=True, metavar="NAME[,NAME]", default_text="all",
        problem="{value!r}: variant names of isa_matrix.toml (letters, digits, '_'), 'all' or 'native'")
    arch: str | None = setting(None, "Target arch from isa_matrix.toml (default: the host's).",
                               pattern=r"[A-Za-z0-9_]+", metavar="ARCH", default_text="the host's")
    out: Path = setting(Path("wheelhouse"), "Output directory (default: <project>/wheelhouse/).",
                        nonempty=True, metavar="DIR", default_text="<project>/wheelhouse/")
    build_root: Path | None = setting(None, "Where the per-(arch, ISA set) build directories live "
                                      "(default: <project>/build/cpubuild).", nonempty=True, metavar="DIR",
                                      default_text="<project>/build/cpubuild")
    frontend: str = setting("auto", "PEP 517 frontend (default: auto = uv when installed, else build).",
                            choices=FRONTENDS)
    isolation: str = setting("auto", "Isolated build environment (default: auto, i.e. only when the backend "
                             "is not installed here).", choices=SWITCHES)
    jobs: int | None = setting(None, "Parallel compile jobs (default: all CPUs).", minimum=1, flags=("-j", "--jobs"),
                               metavar="N", default_text="all CPUs")
    ccache: str = setting("auto", "Compiler cache (default: auto, used when installed).", choices=SWITCHES)
    cache: str | None = setting(None, "A compiler cache shared between runners: s3://BUCKET[/PREFIX], served by "
                                "sccache >= 0.16 (credentials and endpoint from the usual AWS_* environment). "
                                "Default: none (the local ccache of --ccache).", pattern=r"s3://[a-z0-9.-]+(/\S*)?",
                                metavar="s3://BUCKET[/PREFIX]", default_text="none",
                                problem="{value!r}: an S3 URL, s3://BUCKET[/PREFIX] (bucket: lower-case letters, digits, '.', '-')")
    repair: bool = setting(True, "auditwheel repair (default: on).")
    clean: bool = setting(False, "Start from an empty build directory.")
    torch: str | None = setting(None, "Torch projects: the torch to build against (native: the environment's, "
                                "which must be this version; cross: its wheel for the target is fetched). The wheel "
                                "pins torch==X.Y.* and is labelled +cpu.ptXY.", pattern=r"[0-9][0-9A-Za-z.+-]*",
                                metavar="X.Y.Z", default_text="this Python's torch")
    partial: bool = setting(False, "Build a part for `cpubuild merge` (one CI runner's share): the variants "
                            "--isa names, plus the baseline; an arch with a floor gets its floor only where --isa "
                            "names it, so one partial compiles it instead of every one (docs/scale-out.md).")
    variant_wheels: bool = setting(False, "Also make PEP 825 variant wheels from the wheel: one per install-time "
                                   "CPU level the variants map to (x86-64 v1..v4; the matrix's install-level), "
                                   "plus `null`, and {name}-{version}-variants.json.")
    config_settings: tuple[str, ...] = setting((), "Extra PEP 517 config-settings for scikit-build-core (repeatable), "
                                               "e.g. -C cmake.build-type=RelWithDebInfo; not the keys cpubuild sets "
                                               "for the variants (build-dir, cmake.define.CPUBUILD_*).",
                                               pattern=CONFIG_SETTING, flags=("-C", "--config-setting"),
                                               metavar="KEY=VALUE")


@dataclass(frozen=True, kw_only=True)
class EmulatedTestSettings:
    """[tool.cpubuild.test]: defaults of `cpubuild test` (CPUBUILD_TEST_* and the command line override)."""

    layered = True
    env_prefix = "CPUBUILD_TEST_"  # not CPUBUILD_ARCH: a wheel's and a test's arch are set apart

    arch: str | None = setting(None, "Target arch (x86_64, aarch64, s390x or an alias; required).", nonempty=True,
                               metavar="ARCH", default_text="required")
    cpu: str | None = setting(None, "qemu-user CPU model, e.g. cortex-a53, neoverse-n1, max, 'max,vxeh=off', "
                              "Haswell; or bochs:MODEL (x86_64: bochs:tigerlake, bochs:corei7_icelake_u, "
                              "bochs:corei7_skylake_x) for Bochs 2.7 full-system runs; bochs:sapphire_rapids runs the "
                              "project's GEMM C ABI ([tool.cpubuild.baremetal]) bare metal under Bochs 3.0 "
                              "(docs/amx.md); required.", nonempty=True, metavar="MODEL", default_text="required")
    force_variant: str | None = setting(None, "Force a variant (<PREFIX>_ISA) inside the emulated run.",
                                        nonempty=True, metavar="NAME")
    expect: str | None = setting(None, "Fail unless the dispatcher selects this variant; 'auto': the best one the "
                                 "CPU model runs, by cpubuild's hardware data; 'none': a CPU below the package's "
                                 "floor, refused cleanly.", nonempty=True, metavar="NAME")
    checks: bool = setting(True, "Run the project's selftest, not only the selection report (default: on).")
    wheelhouse: Path | None = setting(None, "Where to look for the wheel when WHEEL is not given.", nonempty=True,
                                      metavar="DIR", default_text="<project>/wheelhouse")


@dataclass(frozen=True, kw_only=True)
class BenchSettings:
    """[tool.cpubuild.bench]: defaults of `cpubuild bench` (CPUBUILD_BENCH_* and the command line override)."""

    layered = True
    env_prefix = "CPUBUILD_BENCH_"

    variants: tuple[str, ...] = setting((), "Variants to time (repeatable, comma-separated; default: every one this "
                                        "CPU runs).", nonempty=True, pattern=r"[A-Za-z][A-Za-z0-9_]*",
                                        comma_list=True, metavar="NAME[,NAME]", default_text="every one this CPU runs")
    python: str | None = setting(None, "The interpreter the package is installed in (a path or a name on PATH); "
                                 "the benchmark runs there.", nonempty=True, metavar="PATH",
                                 default_text="cpubuild's")
    plot: Path | None = setting(None, "Draw the speedup ladder per op and the roofline into this image (e.g. "
                                "ladder.png).", nonempty=True, metavar="FILE")
    roofline: bool = setting(True, "Measure this host's limits (peaks, bandwidth) and each record's share of its "
                             "bound (default: on).")
    runs: int = setting(1, "Run the benchmark this many times (one measurement of the limits): the table shows "
                        "medians, each target its verdict on the median beside every run's figure.", minimum=1,
                        metavar="N")


@dataclass(frozen=True, kw_only=True)
class CiSettings:
    """[tool.cpubuild.ci]: what `cpubuild ci` renders into the workflow."""

    layered = False

    cpubuild: str | None = setting(None, "How the rendered workflow installs cpubuild: a pip requirement or a path "
                                   "(default: cpubuild==<this version>).", nonempty=True,
                                   problem="must be a pip requirement or a path",
                                   default_text="cpubuild==<this version>")
    variant_groups: tuple[dict[str, str], ...] = setting(
        (), "Fan an arch's build out over runners: one build job per group {arch = ..., isa = \"a,b\"}, each "
            "building the baseline and its variants into a partial wheel (`cpubuild wheel --partial`; an arch's floor in "
            "the group that names it, else in every group), then a merge job (`cpubuild merge`). "
            "An arch's groups cover each of its variants once, two groups or more (docs/scale-out.md). Default: "
            "one build job per arch.", record_keys=("arch", "isa"), record_required=("arch", "isa"),
        default_text="one job per arch")


@dataclass(frozen=True, kw_only=True)
class BaremetalSettings:
    """[tool.cpubuild.baremetal]: the GEMM C ABI `cpubuild test --cpu bochs:sapphire_rapids` runs (docs/amx.md)."""

    layered = False

    abi_prefix: str | None = setting(None, "The GEMM C ABI's prefix: <prefix>_packed_bytes, _pack_b, _bf16, "
                                     "_w8a8, _kernel (required for the harness).", pattern=C_IDENTIFIER,
                                     problem="must be a C identifier (the GEMM C ABI's prefix: <prefix>_pack_b, "
                                             "_bf16, _w8a8, _packed_bytes, _kernel)")
    sources: tuple[str, ...] = setting((), "Sources built per variant with the matrix flags, freestanding "
                                       "(required for the harness).", nonempty=True,
                                       problem="must be a non-empty list of strings")
    include_dirs: tuple[str, ...] = setting((), "Include directories.", nonempty=True,
                                            problem="must be a non-empty list of strings")
    compile_options: tuple[str, ...] = setting((), "The project's own compile options (its CMake "
                                               "COMPILE_OPTIONS, warnings aside).", nonempty=True,
                                               problem="must be a non-empty list of strings")
    variants: tuple[str, ...] = setting((), "x86_64 variants to run, in this order (default: those that "
                                        "require AMX).", nonempty=True, pattern=VARIANT,
                                        problem="must be a non-empty list of strings",
                                        default_text="the AMX variants")


@dataclass(frozen=True, kw_only=True)
class CpubuildSettings:
    """[tool.cpubuild]: the project contract (docs/project.md)."""

    layered = False

    package: str | None = setting(None, "Import package the libraries go into (default: [project] name, "
                                  "'-' -> '_').", pattern=PACKAGE, problem="{value!r} is not a Python package name",
                                  default_text="[project] name")
    env_prefix: str | None = setting(None, "Prefix of the runtime variables <PREFIX>_ISA / <PREFIX>_DISABLE_ISA "
                                     "and the -D<PREFIX>_VARIANT_* macros (default: PACKAGE upper-cased).",
                                     pattern=PREFIX, problem="{value!r} must be upper-case letters, digits and '_' "
                                                             "(e.g. DOTLIB)", default_text="PACKAGE upper-cased")
    matrix: str = setting(DEFAULT_MATRIX, "The variants file.", nonempty=True,
                          problem="must be a path relative to pyproject.toml")
    kind: str = setting("ctypes", "How variant libraries are loaded: ctypes (C ABI), or torch (torch.ops "
                        "extensions).", choices=KINDS)
    selftest: str | None = setting(None, "Module [args]: `python -m <this> --json` checks a build (default: the "
                                   "report only).", nonempty=True, problem="must be a non-empty string")
    benchmark: str | None = setting(None, "Script [args]: `cpubuild bench` runs `python <this> --variants a,b "
                                    "--json` (default: none).", nonempty=True, problem="must be a non-empty string")
    source: str | None = setting(None, "The package's source directory, when not src/<pkg>, python/<pkg> or "
                                 "<pkg>.", nonempty=True,
                                 problem="must be the package's source directory, relative to pyproject.toml")
    repair_exclude: tuple[dict[str, str], ...] = setting(
        (), "Shared libraries the wheel must not carry (the repair step leaves them out): {library = soname, "
            "requires = the requirement that provides it, a Requires-Dist}; torch's own are excluded for torch "
            "projects without being listed.", record_keys=("library", "requires"), record_required=("library",))
    wheel: WheelSettings = table("Defaults of `cpubuild wheel` (docs/wheels.md).", WheelSettings)
    test: EmulatedTestSettings = table("Defaults of `cpubuild test` (docs/cross.md).", EmulatedTestSettings)
    bench: BenchSettings = table("Defaults of `cpubuild bench` (docs/project.md).", BenchSettings)
    ci: CiSettings = table("What `cpubuild ci` renders (docs/project.md).", CiSettings)
    baremetal: BaremetalSettings = table("The bare-metal AMX harness (docs/amx.md).", BaremetalSettings)


TABLES: dict[str, type] = {"tool.cpubuild": CpubuildSettings, "tool.cpubuild.wheel": WheelSettings,
                           "tool.cpubuild.test": EmulatedTestSettings, "tool.cpubuild.bench": BenchSettings,
                           "tool.cpubuild.ci": CiSettings, "tool.cpubuild.baremetal": BaremetalSettings}
