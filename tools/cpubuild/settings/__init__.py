"""cpubuild's settings: one typed model of ``[tool.cpubuild]`` (model.py), one
layered reader (reader.py), and what is generated from them (generate.py:
the JSON schema shipped as schema.json, the docs tables; clickopts.py: the
options of the commands that layer). `python -m cpubuild.settings --schema`
or `--docs` prints them."""

from __future__ import annotations

from .errors import LocatedError, SettingsError
from .model import (
    DEFAULT_MATRIX,
    FRONTENDS,
    KINDS,
    SWITCHES,
    TABLES,
    BaremetalSettings,
    BenchSettings,
    CiSettings,
    CpubuildSettings,
    EmulatedTestSettings,
    WheelSettings,
)
from .reader import Field, fields_of, layer, read_table, split_list

__all__ = [
    "DEFAULT_MATRIX", "FRONTENDS", "KINDS", "SWITCHES", "TABLES", "BaremetalSettings", "BenchSettings", "CiSettings",
    "CpubuildSettings", "EmulatedTestSettings", "Field", "LocatedError", "SettingsError", "WheelSettings", "fields_of", "layer",
    "read_table", "split_list",
]
