"""Runtime dispatcher: probe the host once, pick a variant, load its library.

cpubuild copies this runtime into every package it builds (``<package>/_cpubuild/``)
next to the manifest the build wrote (``<package>/_manifest.json``): the
package needs nothing at run time but the standard library. Nothing is probed
or loaded until the first call that needs it. The probe library is compiled
for the arch's baseline; a variant library is dlopen()ed only after the probe
approved it.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import DispatchError, ManifestError, UnknownISAError, UnsupportedISAError
from .select import (
    FeatureReport,
    RawProbe,
    Selection,
    decode_features,
    env_names,
    lacking,
    parse_name_list,
    select_variant,
)

MANIFEST = "_manifest.json"
# Each variant library built by cpubuild exports this (its variant's name):
# a stale or misplaced file is caught before its code runs.
VARIANT_SYMBOL = "cpubuild_variant_name"

LoadHook = Callable[[str, Any], None]  # (variant, its ctypes.CDLL or, for a torch project, its path)


@dataclass(frozen=True, kw_only=True)
class Host:
    arch: str
    features: FeatureReport
    raw: RawProbe


def read_probe(lib: ctypes.CDLL, specs: Iterable[Mapping[str, Any]]) -> RawProbe:
    """The raw facts a probe library reports for the features in `specs`."""
    specs = list(specs)
    if hasattr(lib, "cpubuild_probe_cpuid"):
        lib.cpubuild_probe_cpuid.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32)]
        lib.cpubuild_probe_cpuid.restype = ctypes.c_int
        leaves = {(int(s[key][0]), int(s[key][1])) for s in specs for key in ("cpuid", "version") if key in s}
        cpuid: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        for leaf, sub in sorted(leaves):
            regs = (ctypes.c_uint32 * 4)()
            lib.cpubuild_probe_cpuid(leaf, sub, regs)
            cpuid[(leaf, sub)] = (regs[0], regs[1], regs[2], regs[3])
        xcr0 = ctypes.c_uint64()
        lib.cpubuild_probe_xcr0.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
        has_xsave = lib.cpubuild_probe_xcr0(ctypes.byref(xcr0))
        return RawProbe(cpuid=cpuid, xcr0=xcr0.value if has_xsave else None)
    if hasattr(lib, "cpubuild_probe_sysctl"):
        lib.cpubuild_probe_sysctl.argtypes = [ctypes.c_char_p]
        lib.cpubuild_probe_sysctl.restype = ctypes.c_int64
        names = {str(s["sysctl"]) for s in specs if "sysctl" in s}
        return RawProbe(sysctl={n: int(lib.cpubuild_probe_sysctl(n.encode())) for n in sorted(names)})
    if hasattr(lib, "cpubuild_probe_hwcap"):
        lib.cpubuild_probe_hwcap.argtypes = [ctypes.c_int]
        lib.cpubuild_probe_hwcap.restype = ctypes.c_uint64
        return RawProbe(hwcap=int(lib.cpubuild_probe_hwcap(1)), hwcap2=int(lib.cpubuild_probe_hwcap(2)))
    return RawProbe()


def probe_host(lib: ctypes.CDLL, specs: Mapping[str, Mapping[str, Any]]) -> tuple[FeatureReport, RawProbe]:
    """Reads the probe and decodes the features `specs` describes."""
    raw = read_probe(lib, specs.values())

    def permission(name: str) -> bool:
        fn = getattr(lib, "cpubuild_probe_amx_permission", None)
        return name == "xtiledata" and fn is not None and bool(fn())

    return decode_features(specs, raw, darwin=sys.platform == "darwin", permission=permission), raw


# What every manifest holds, and the type each must have (the rest is optional).
REQUIRED: dict[str, type | tuple[type, ...]] = {"env_prefix": str, "arch": str, "probe": str, "features": (list, dict), "variants": list}


def read_manifest(path: Path, package: str) -> dict[str, Any]:
    """The manifest as a dict, or one ManifestError line naming the file and the problem."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ManifestError(f"{package} is not built: {path} is missing ({exc.strerror})") from None
    except OSError as exc:
        raise ManifestError(f"{package} is not installed properly: {path} cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ManifestError(f"{package} is not installed properly: {path} is not UTF-8 text; reinstall the package") from None
    except ValueError as exc:
        raise ManifestError(f"{package} is not installed properly: {path} is not JSON ({exc}); reinstall the package") from None
    problem = _manifest_problem(doc)
    if problem:
        raise ManifestError(f"{package} is not installed properly: {path}: {problem}; reinstall the package")
    return dict(doc)


def _manifest_problem(doc: Any) -> str | None:
    if not isinstance(doc, dict):
        return "not a JSON object"
    for key, kind in REQUIRED.items():
        if not isinstance(doc.get(key), kind):
            return f"{key!r} is missing or of the wrong type"
    for i, variant in enumerate(doc["variants"]):
        if not isinstance(variant, dict) or not isinstance(variant.get("name"), str) or not isinstance(variant.get("library"), str):
            return f"variants[{i}] is not an object with string 'name' and 'library'"
        if "/" in variant["library"] or "\\" in variant["library"] or variant["library"] in ("", ".", ".."):
            return f"variants[{i}].library {variant['library']!r} is not a file name in the package"
    if "/" in doc["probe"] or doc["probe"] in ("", ".", ".."):
        return f"probe {doc['probe']!r} is not a file name in the package"
    return None


class Dispatcher:
    """The dispatcher of one package directory (its manifest and libraries)."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir
        self._lock = threading.RLock()
        self._state: dict[str, Any] = {}
        self._hooks: list[LoadHook] = []

    # ------------------------------------------------------------ build facts

    def manifest(self) -> dict[str, Any]:
        """The build's manifest (written by cpubuild's CMake package)."""
        with self._lock:
            if "manifest" not in self._state:
                self._state["manifest"] = read_manifest(self.package_dir / MANIFEST, self.package_dir.name)
            result: dict[str, Any] = self._state["manifest"]
            return result

    @property
    def package(self) -> str:
        return str(self.manifest().get("package", self.package_dir.name))

    @property
    def kind(self) -> str:
        return str(self.manifest().get("kind", "ctypes"))

    @property
    def env_prefix(self) -> str:
        return str(self.manifest()["env_prefix"])

    @property
    def force_env(self) -> str:
        return env_names(self.env_prefix)[0]

    @property
    def disable_env(self) -> str:
        return env_names(self.env_prefix)[1]

    def variants(self) -> list[dict[str, Any]]:
        """Every variant of the arch (built or not), lowest priority first."""
        return list(self.manifest()["variants"])

    def library_path(self, name: str) -> Path:
        for v in self.variants():
            if v["name"] == name:
                return self.package_dir / str(v["library"])
        raise KeyError(name)

    def built_variants(self) -> list[str]:
        """Variants the build made (manifest) whose library file is really present."""
        return [v["name"] for v in self.variants() if v.get("built", True) and (self.package_dir / v["library"]).is_file()]

    # ------------------------------------------------------------ the host

    def host(self) -> Host:
        with self._lock:
            if "host" not in self._state:
                lib = ctypes.CDLL(str(self.package_dir / str(self.manifest()["probe"])))
                report, raw = probe_host(lib, self.manifest()["features"])
                self._state["host"] = Host(arch=str(self.manifest()["arch"]), features=report, raw=raw)
            result: Host = self._state["host"]
            return result

    # ------------------------------------------------------------ the choice

    def selection(self) -> Selection:
        """The dispatcher's decision under the current environment (cached)."""
        made: Selection | None = self._state.get("selection")  # no lock once made: every op call asks
        if made is not None:
            return made
        with self._lock:
            if "selection" not in self._state:
                self._state["selection"] = select_variant(
                    self.variants(),
                    self.host().features.found,
                    built=self.built_variants(),
                    forced=os.environ.get(self.force_env, "").strip() or None,
                    disabled=parse_name_list(os.environ.get(self.disable_env)),
                    env_prefix=self.env_prefix,
                    package=self.package,
                )
            result: Selection = self._state["selection"]
            return result

    def selected_isa(self) -> str:
        """Name of the variant this package uses on this host."""
        return self.selection().selected

    def check_runnable(self, name: str, *, source: str | None = None) -> None:
        """Raises unless variant `name` is built and this CPU can run it; the error
        names `source`, the request (default: this call, not the environment)."""
        source = source or f"check_runnable({name!r})"
        names = [v["name"] for v in self.variants()]
        built = self.built_variants()
        if name not in built:
            raise UnknownISAError(name, built, known=name in names, source=source)
        wanted = next(v for v in self.variants() if v["name"] == name)
        short = lacking(wanted["requires"], self.host().features.found)
        if short:
            raise UnsupportedISAError(name, list(short), source=source)

    def supported_variants(self) -> list[str]:
        """Built variants this CPU can run, lowest priority first."""
        have = set(self.host().features.found)
        built = set(self.built_variants())
        return [v["name"] for v in self.variants() if v["name"] in built and not lacking(v["requires"], have)]

    # ------------------------------------------------------------ loading

    def add_load_hook(self, hook: LoadHook) -> None:
        """`hook(variant, library)` runs once per variant library, right after it is loaded."""
        with self._lock:
            self._hooks.append(hook)

    def load_variant(self, name: str) -> Any:
        """The library of one variant, after checking the CPU runs it (cached): a
        ctypes.CDLL, or for a torch project the path torch.ops.load_library loaded."""
        loaded = self._state.get("libs")
        if loaded is not None and (ready := loaded.get(name)) is not None:
            return ready  # no lock once loaded (a dict read): every op call of a forced variant asks
        with self._lock:
            libs: dict[str, Any] = self._state.setdefault("libs", {})
            if name not in libs:
                self.check_runnable(name, source=f"load_variant({name!r})")
                path = self.library_path(name)
                lib: Any
                if self.kind == "torch":
                    lib = self._load_torch(name, path)
                    self._check_variant(ctypes.CDLL(str(path)), name, path)  # dlopen again: the same handle
                else:
                    lib = ctypes.CDLL(str(path))
                    self._check_variant(lib, name, path)
                for hook in self._hooks:
                    hook(name, lib)
                libs[name] = lib
            return libs[name]

    @staticmethod
    def _check_variant(lib: ctypes.CDLL, name: str, path: Path) -> None:
        if hasattr(lib, VARIANT_SYMBOL):
            getattr(lib, VARIANT_SYMBOL).restype = ctypes.c_char_p
            loaded = getattr(lib, VARIANT_SYMBOL)().decode()
            if loaded != name:
                raise ImportError(f"{path} reports variant {loaded!r}, expected {name!r}")

    def _load_torch(self, name: str, path: Path) -> Path:
        """torch.ops.load_library of one variant: its TORCH_LIBRARY registers the
        package's ops, which only one variant per process may do."""
        other = next(iter(self._state.get("libs", {})), None)
        if other is not None:
            raise DispatchError(f"{self.package}: variant {other!r} is already loaded; a torch project loads one variant "
                                f"per process (its TORCH_LIBRARY registers the ops once): set {self.force_env} before first use")
        import torch

        built = str(self.manifest().get("torch", ""))
        if built and _minor(built) != _minor(torch.__version__):
            raise ImportError(f"{self.package} was built for torch {_minor(built)}; this is torch {torch.__version__}: "
                              f"install torch=={_minor(built)}.* or a {self.package} built for torch {_minor(torch.__version__)}")
        torch.ops.load_library(str(path))  # type: ignore[no-untyped-call]
        return path

    def library(self) -> Any:
        """The selected variant's library (see load_variant)."""
        return self.load_variant(self.selected_isa())

    def reset(self) -> None:
        """Forget the cached decision (tests change <PREFIX>_ISA between calls)."""
        with self._lock:
            for key in ("selection", "host"):
                self._state.pop(key, None)

    @contextmanager
    def substitute(self, libraries: Mapping[str, Any]) -> Iterator[None]:
        """The seam for tests: load_variant(name) returns these libraries (no CPU check,
        no load hook) until the block ends - e.g. variants built for an emulator."""
        with self._lock:
            libs: dict[str, Any] = self._state.setdefault("libs", {})
            saved = {name: libs[name] for name in libraries if name in libs}
            libs.update(libraries)
        try:
            yield
        finally:
            with self._lock:
                for name in libraries:
                    libs.pop(name, None)
                libs.update(saved)


def _minor(version: str) -> str:
    return ".".join(version.split("+", 1)[0].split(".")[:2])


DISPATCHER = Dispatcher(Path(__file__).resolve().parent.parent)
