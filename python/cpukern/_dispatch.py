"""Runtime dispatcher: probe the host once, pick a variant, load its library.

Import-time cost is kept near zero: nothing is probed or loaded until the
first call that needs it. The probe library is compiled for the arch's
baseline; a variant library is dlopen()ed only after the probe approved it.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._select import FeatureReport, RawProbe, Selection, decode_features, parse_name_list, select_variant
from .errors import UnknownISAError, UnsupportedISAError

PACKAGE_DIR = Path(__file__).resolve().parent
ENV_FORCE = "CPUKERN_ISA"
ENV_DISABLE = "CPUKERN_DISABLE_ISA"

_lock = threading.RLock()
_state: dict[str, Any] = {}


@dataclass(frozen=True, kw_only=True)
class Host:
    arch: str
    features: FeatureReport
    raw: RawProbe


def manifest() -> dict[str, Any]:
    """The build's manifest (written by CMake from isa_matrix.toml)."""
    with _lock:
        if "manifest" not in _state:
            path = PACKAGE_DIR / "_manifest.json"
            try:
                _state["manifest"] = json.loads(path.read_text(encoding="utf-8"))
            except OSError as exc:
                raise ImportError(f"cpukern is not built: {path} is missing ({exc.strerror})") from None
        result: dict[str, Any] = _state["manifest"]
        return result


def library_path(name: str) -> Path:
    for v in manifest()["variants"]:
        if v["name"] == name:
            return PACKAGE_DIR / str(v["library"])
    raise KeyError(name)


def built_variants() -> list[str]:
    """Variants the build made (manifest) whose library file is really present."""
    return [v["name"] for v in manifest()["variants"]
            if v.get("built", True) and (PACKAGE_DIR / v["library"]).is_file()]


def _probe_library() -> ctypes.CDLL:
    suffix = ".dylib" if sys.platform == "darwin" else ".so"
    return ctypes.CDLL(str(PACKAGE_DIR / f"_cpukern_probe{suffix}"))


def read_probe() -> tuple[RawProbe, ctypes.CDLL]:
    lib = _probe_library()
    specs = manifest()["features"].values()
    if hasattr(lib, "cpukern_probe_cpuid"):
        lib.cpukern_probe_cpuid.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32)]
        lib.cpukern_probe_cpuid.restype = ctypes.c_int
        leaves = {(int(s["cpuid"][0]), int(s["cpuid"][1])) for s in specs if "cpuid" in s}
        cpuid: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        for leaf, sub in sorted(leaves):
            regs = (ctypes.c_uint32 * 4)()
            lib.cpukern_probe_cpuid(leaf, sub, regs)
            cpuid[(leaf, sub)] = (regs[0], regs[1], regs[2], regs[3])
        xcr0 = ctypes.c_uint64()
        lib.cpukern_probe_xcr0.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
        has_xsave = lib.cpukern_probe_xcr0(ctypes.byref(xcr0))
        return RawProbe(cpuid=cpuid, xcr0=xcr0.value if has_xsave else None), lib
    if hasattr(lib, "cpukern_probe_sysctl"):
        lib.cpukern_probe_sysctl.argtypes = [ctypes.c_char_p]
        lib.cpukern_probe_sysctl.restype = ctypes.c_int64
        names = {str(s["sysctl"]) for s in specs if "sysctl" in s}
        return RawProbe(sysctl={n: int(lib.cpukern_probe_sysctl(n.encode())) for n in sorted(names)}), lib
    if hasattr(lib, "cpukern_probe_hwcap"):
        lib.cpukern_probe_hwcap.argtypes = [ctypes.c_int]
        lib.cpukern_probe_hwcap.restype = ctypes.c_uint64
        return RawProbe(hwcap=int(lib.cpukern_probe_hwcap(1)), hwcap2=int(lib.cpukern_probe_hwcap(2))), lib
    return RawProbe(), lib


def host() -> Host:
    with _lock:
        if "host" not in _state:
            raw, lib = read_probe()

            def permission(name: str) -> bool:
                fn = getattr(lib, "cpukern_probe_amx_permission", None)
                return name == "xtiledata" and fn is not None and bool(fn())

            report = decode_features(
                manifest()["features"], raw, darwin=sys.platform == "darwin", permission=permission
            )
            _state["host"] = Host(arch=str(manifest()["arch"]), features=report, raw=raw)
        result: Host = _state["host"]
        return result


def selection() -> Selection:
    """The dispatcher's decision under the current environment (cached)."""
    with _lock:
        if "selection" not in _state:
            _state["selection"] = select_variant(
                manifest()["variants"],
                host().features.found,
                built=built_variants(),
                forced=os.environ.get(ENV_FORCE, "").strip() or None,
                disabled=parse_name_list(os.environ.get(ENV_DISABLE)),
            )
        result: Selection = _state["selection"]
        return result


def selected_isa() -> str:
    """Name of the variant cpukern uses on this host."""
    return selection().selected


def check_runnable(name: str) -> None:
    """Raises unless variant `name` is built and this CPU can run it."""
    names = [v["name"] for v in manifest()["variants"]]
    built = built_variants()
    if name not in built:
        raise UnknownISAError(name, built, known=name in names)
    wanted = next(v for v in manifest()["variants"] if v["name"] == name)
    lacking = [f for f in wanted["requires"] if f not in host().features.found]
    if lacking:
        raise UnsupportedISAError(name, lacking)


def supported_variants() -> list[str]:
    """Built variants this CPU can run, lowest priority first."""
    have = set(host().features.found)
    return [v["name"] for v in manifest()["variants"]
            if v["name"] in built_variants() and all(f in have for f in v["requires"])]


def load_variant(name: str) -> ctypes.CDLL:
    """The library of one variant, after checking the CPU runs it (cached)."""
    with _lock:
        libs: dict[str, ctypes.CDLL] = _state.setdefault("libs", {})
        if name not in libs:
            check_runnable(name)
            lib = ctypes.CDLL(str(library_path(name)))
            lib.cpukern_variant_name.restype = ctypes.c_char_p
            loaded = lib.cpukern_variant_name().decode()
            if loaded != name:
                raise ImportError(f"{library_path(name)} reports variant {loaded!r}, expected {name!r}")
            from . import _threads

            _threads.configure(lib)  # CPUKERN_OMP_THREADS_BIND, before the pool starts
            libs[name] = lib
        return libs[name]


def library() -> ctypes.CDLL:
    """The selected variant's library."""
    return load_variant(selected_isa())


def reset() -> None:
    """Forget the cached decision (tests change CPUKERN_ISA between calls)."""
    with _lock:
        for key in ("selection", "host"):
            _state.pop(key, None)
