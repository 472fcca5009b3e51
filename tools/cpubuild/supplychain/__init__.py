"""What a rendered pipeline installs and runs, made safe to render: the
cpubuild requirement parsed (PEP 508) and shell-quoted, and GitHub Actions
pinned to commit SHAs from a table kept as data (actions.toml)."""

from __future__ import annotations

import re
import shlex
import sys
from functools import cache
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from ..errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PINS_FILE = Path(__file__).with_name("actions.toml")
USES = re.compile(r"^(?P<lead>\s*(?:-\s+)?uses:\s+)(?P<action>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)@(?P<ref>[A-Za-z0-9_.-]+)\s*$", re.M)
SAFE_PATH = re.compile(r"[A-Za-z0-9_./+-]+")
ARCHIVES = (".whl", ".tar.gz", ".zip")  # a path to one distribution, not to a source directory


class RequirementError(UsageError):
    """A requirement string that cannot be rendered into a workflow."""


class UnpinnedActionError(UsageError):
    """An action whose tag the SHA table does not know."""


def install_spec(spec: str, extras: str = "", *, where: str = "[tool.cpubuild.ci] cpubuild") -> str:
    """pip arguments for `spec` (a PEP 508 requirement or a local path) with
    `extras` added, quoted for the shell; RequirementError (one line) otherwise.
    A path to a directory is cpubuild's source (tools/ of a checkout): its two
    distributions, cpubuild-core there and cpubuild (which takes the extras) in cli/."""
    text = spec.strip()
    if "${{" in text or any(not c.isprintable() for c in text):
        raise RequirementError(f"{where} = {spec!r}: holds an expression or a control character")
    if text.startswith((".", "/")) or ("/" in text and "://" not in text and "@" not in text):
        if not SAFE_PATH.fullmatch(text) or text.startswith("-"):
            raise RequirementError(f"{where} = {spec!r}: a path may hold only letters, digits and . _ / + -")
        if text.endswith(ARCHIVES):
            return shlex.quote(f"{text}[{extras}]" if extras else text)
        cli = f"{text.rstrip('/')}/cli"
        return f"{text} {shlex.quote(f'{cli}[{extras}]' if extras else cli)}"
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        first = str(exc).splitlines()[0]
        raise RequirementError(f"{where} = {spec!r}: not a PEP 508 requirement ({first})") from None
    if requirement.url and "@" in requirement.url.split("://", 1)[-1].split("/", 1)[0]:
        raise RequirementError(f"{where}: its URL carries credentials, which would be committed with the workflow; "
                               "give the jobs an index through a secret instead (PIP_INDEX_URL)")
    if extras:
        requirement.extras |= {e.strip() for e in extras.split(",") if e.strip()}
    rendered = str(requirement)
    return rendered if SAFE_PATH.fullmatch(rendered) else shlex.quote(rendered)


@cache
def action_pins() -> dict[str, dict[str, dict[str, str]]]:
    data: dict[str, Any] = tomllib.loads(PINS_FILE.read_text(encoding="utf-8"))
    return {action: {tag: dict(pin) for tag, pin in tags.items()} for action, tags in data["pins"].items()}


def pin_actions(workflow: str) -> str:
    """The workflow text with every `uses: owner/repo@tag` pinned to its commit SHA (`# release` after it)."""
    pins = action_pins()

    def pinned(match: re.Match[str]) -> str:
        action, ref = match["action"], match["ref"]
        pin = pins.get(action, {}).get(ref)
        if pin is None:
            raise UnpinnedActionError(f"{action}@{ref}: no commit SHA for it in cpubuild's action table ({PINS_FILE.name})")
        return f"{match['lead']}{action}@{pin['sha']}  # {pin['release']}"

    return USES.sub(pinned, workflow)
