"""`cpubuild audit` speed: the time to audit a cpukern wheel (target: under
2 s on 2 cores) and its throughput in MB of code per second, then a large
third-party library (torch's libtorch_cpu.so from this Python's torch), whose
first --large-mb MB of code are decoded (the whole of it takes minutes).

    python benchmarks/bench_audit.py [--wheel cpukern-...whl] [--large PATH] [--large-mb 32] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

from cpubuild.audit import audit_target  # noqa: E402
from cpubuild.audit.elf import read_elf  # noqa: E402
from cpubuild.audit.scan import scan_library  # noqa: E402


def default_wheel() -> Path | None:
    found = sorted(glob.glob(str(REPO / "wheelhouse" / "cpukern-*x86_64.whl")))
    return Path(found[-1]) if found else None


def default_large() -> Path | None:
    try:
        import torch
    except ImportError:
        return None
    path = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    return path if path.exists() else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, default=default_wheel(), help="an all-variant cpukern wheel (default: wheelhouse/)")
    parser.add_argument("--large", type=Path, default=default_large(), help="a large library (default: torch's libtorch_cpu.so)")
    parser.add_argument("--large-mb", type=float, default=32.0, help="MB of the large library's code to decode (0: all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict[str, object] = {}
    if args.wheel:
        started = time.perf_counter()
        result = audit_target(args.wheel)
        seconds = time.perf_counter() - started
        out["wheel"] = {"path": args.wheel.name, "ok": result.ok, "code_mb": result.text_bytes / 1e6, "seconds": seconds,
                        "mb_per_s": result.text_bytes / 1e6 / seconds,
                        "instructions": sum(lib.scan.instructions for lib in result.libraries)}
    if args.large:
        started = time.perf_counter()
        image = read_elf(args.large.name, args.large.read_bytes())
        limit = int(args.large_mb * 1e6) if args.large_mb else None
        sections, left = [], limit
        for section in image.sections:  # the first `limit` bytes of code
            if left is not None and left <= 0:
                break
            data = section.data if left is None else section.data[:left]
            sections.append(dataclasses.replace(section, data=data))
            left = None if left is None else left - len(data)
        image = dataclasses.replace(image, sections=tuple(sections))
        scan = scan_library(image, None)
        seconds = time.perf_counter() - started
        out["large"] = {"path": str(args.large), "file_mb": args.large.stat().st_size / 1e6,
                        "code_mb_total": sum(len(s.data) for s in read_elf(args.large.name, args.large.read_bytes()).sections) / 1e6,
                        "code_mb_decoded": image.text_bytes / 1e6, "seconds": seconds,
                        "mb_per_s": image.text_bytes / 1e6 / seconds, "instructions": scan.instructions,
                        "top_features": dict(scan.by_feature.most_common(6))}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for key, row in out.items():
            print(f"{key}: " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    sys.exit(main())
