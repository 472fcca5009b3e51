"""The one error for a bad setting: which file (or the environment, or the
command line), which key, and what is wrong - printed as one line."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError


class LocatedError(ValueError):
    """A problem in a project file: which file, where in it, and what (often with the fix)."""

    def __init__(self, path: Path | str, where: str, problem: str) -> None:
        self.path = str(path)
        self.where = where
        self.problem = problem
        super().__init__(f"{self.path}: {where}: {problem}")


class SettingsError(LocatedError, UsageError):
    """A bad value or key in [tool.cpubuild] (or a CPUBUILD_* variable, or an option): exit 2."""

    def __init__(self, path: Path | str, where: str, problem: str) -> None:
        super().__init__(path, where, problem)
        self.message = str(self)
        self.detail = None
