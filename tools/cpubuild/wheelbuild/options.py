"""Options of `cpubuild wheel`, layered like cibuildwheel's.

Lowest to highest precedence: built-in defaults, pyproject.toml's
``[tool.cpubuild.wheel]`` (the project's choice), ``CPUBUILD_*`` environment
variables (the CI job's choice), command-line options (this run's choice).
The options themselves are fields of cpubuild.settings.WheelSettings.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..settings import FRONTENDS, SWITCHES, WheelSettings, layer

WheelOptions = WheelSettings
__all__ = ["FRONTENDS", "SWITCHES", "WheelOptions", "layer_options"]


def layer_options(
    *,
    pyproject: Mapping[str, Any],
    environ: Mapping[str, str],
    cli: Mapping[str, Any],
    project: Path,
    cwd: Path,
) -> WheelOptions:
    """Merges defaults < pyproject < environment < CLI. `cli` holds only options given."""
    options: WheelOptions = layer(WheelSettings, pyproject=pyproject, pyproject_path=project / "pyproject.toml",
                                  table_name="tool.cpubuild.wheel", environ=environ, cli=cli, project=project, cwd=cwd)
    return options
