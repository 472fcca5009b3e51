"""buildx bake files (JSON): the whole image matrix for parallel BuildKit builders.

One target per (platform, ISA set) and image stage, plus a `wheel-*` target
per pair that exports the built wheel with `--output type=local` (group
`wheels`). `validate` checks a bake document against the Dockerfile (the
targets exist as stages, every arg is declared); buildx itself is not
installable on the build hosts, so this is what keeps generated files honest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..matrix import Matrix
from . import dockerfile
from .context import TORCH_DIR, WHEEL_DIR
from .plan import ImageSpec

TARGET_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
PLATFORM = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$")
# Target attributes of the bake JSON format this generator uses.
TARGET_KEYS = frozenset({"context", "dockerfile", "target", "platforms", "args", "tags", "labels", "output", "pull"})


def target_name(spec: ImageSpec, stage: str | None = None) -> str:
    return f"{stage or spec.target}-{spec.arch.debian_arch}-{spec.label}".replace("_", "-")


def wheel_dir(spec: ImageSpec) -> str:
    """Where a target's prebuilt wheel goes in the context: one folder per target,
    since every target of a bake shares the one context."""
    return f"{WHEEL_DIR}/{target_name(spec)}"


def torch_dir(spec: ImageSpec, torch: str) -> str:
    """Where the torch wheels of a torch project's target go in the context: one folder
    per platform and torch release, shared by the targets that need the same."""
    return f"{TORCH_DIR}/{spec.arch.debian_arch}-{torch.split('+', 1)[0]}"


def bake_document(matrix: Matrix, specs: Sequence[ImageSpec], *, dockerfile: str, context: str = ".",
                  torch: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`torch` maps a torch project's image tags to the torch folder of their target (torch_dir)."""
    targets: dict[str, dict[str, Any]] = {}
    groups: dict[str, list[str]] = {"default": [], "wheels": []}
    for spec in specs:
        name = target_name(spec)
        folder = (torch or {}).get(spec.tag)
        args = spec.build_args(matrix, wheel_dir=wheel_dir(spec) if spec.wheel else str(WHEEL_DIR), torch_dir=folder)
        targets[name] = {
            "context": context,
            "dockerfile": dockerfile,
            "target": spec.target,
            "platforms": [spec.platform],
            "args": args,
            "tags": [spec.tag],
            "labels": {"io.cpubuild.isa": spec.label, "io.cpubuild.platform": spec.platform},
            "pull": False,
        }
        groups["default"].append(name)
        groups.setdefault(spec.arch.debian_arch, []).append(name)
        wheel_name = target_name(spec, "wheel")
        targets[wheel_name] = {
            "context": context,
            "dockerfile": dockerfile,
            "target": "wheel",
            "platforms": [spec.platform],
            "args": args,
            "output": [f"type=local,dest=wheelhouse/{spec.arch.debian_arch}-{spec.label}"],
        }
        groups["wheels"].append(wheel_name)
    return {"group": {name: {"targets": names} for name, names in groups.items() if names}, "target": targets}


def validate(document: Any, dockerfile_text: str) -> list[str]:
    """Problems of a bake document; empty when it is well formed."""
    problems: list[str] = []
    if not isinstance(document, dict):
        return ["the document must be a JSON object"]
    extra = set(document) - {"group", "target", "variable"}
    if extra:
        problems.append(f"unknown top-level keys: {', '.join(sorted(extra))}")
    targets = document.get("target")
    if not isinstance(targets, dict) or not targets:
        return [*problems, "'target' must be a non-empty object"]
    stage_names = set(dockerfile.stages(dockerfile_text))
    declared = dockerfile.declared_args(dockerfile_text)
    for name, target in targets.items():
        where = f"target {name!r}"
        if not TARGET_NAME.fullmatch(name):
            problems.append(f"{where}: name must match {TARGET_NAME.pattern}")
        if not isinstance(target, dict):
            problems.append(f"{where}: must be an object")
            continue
        unknown = set(target) - TARGET_KEYS
        if unknown:
            problems.append(f"{where}: unknown keys {', '.join(sorted(unknown))}")
        for key in ("context", "dockerfile", "target"):
            if not isinstance(target.get(key), str) or not target[key]:
                problems.append(f"{where}: {key!r} must be a non-empty string")
        if isinstance(target.get("target"), str) and target["target"] not in stage_names:
            problems.append(f"{where}: stage {target['target']!r} is not in the Dockerfile ({', '.join(sorted(stage_names))})")
        platforms = target.get("platforms")
        if not isinstance(platforms, list) or not platforms or not all(isinstance(p, str) and PLATFORM.fullmatch(p) for p in platforms):
            problems.append(f"{where}: 'platforms' must be a non-empty list of os/arch strings")
        args = target.get("args", {})
        if not isinstance(args, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in args.items()):
            problems.append(f"{where}: 'args' must map strings to strings")
        else:
            undeclared = sorted(set(args) - declared)
            if undeclared:
                problems.append(f"{where}: args not declared in the Dockerfile: {', '.join(undeclared)}")
        for key in ("tags", "output"):
            value = target.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                problems.append(f"{where}: {key!r} must be a list of strings")
    groups = document.get("group", {})
    if not isinstance(groups, dict) or "default" not in groups:
        problems.append("'group' must be an object with a 'default' group")
    else:
        for gname, group in groups.items():
            members = group.get("targets") if isinstance(group, dict) else None
            if not isinstance(members, list) or not members:
                problems.append(f"group {gname!r}: 'targets' must be a non-empty list")
                continue
            missing = [m for m in members if m not in targets]
            if missing:
                problems.append(f"group {gname!r}: unknown targets {', '.join(map(str, missing))}")
    return problems
