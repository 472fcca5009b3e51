"""The command-line options of a layered settings table, generated from its
fields: adding a field adds the option (and its help)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .reader import Field, fields_of

F = TypeVar("F", bound=Callable[..., Any])


def option_for(field: Field) -> Callable[[F], F]:
    flags = list(field.flags)
    kwargs: dict[str, Any] = {"help": field.help, "default": None}
    if field.meta.get("metavar"):
        kwargs["metavar"] = field.meta["metavar"]
    if field.kind == "bool":
        if field.default is True:  # on by default: --x/--no-x
            flags = [f"{flags[-1]}/--no-{flags[-1][2:]}"]
        else:
            kwargs["is_flag"] = True
    elif field.kind == "int":
        kwargs["type"] = int
    elif field.kind == "path":
        kwargs["type"] = click.Path(path_type=Path)
    elif field.kind == "strs":
        kwargs["multiple"] = True
    elif field.meta.get("choices"):
        kwargs["type"] = click.Choice(field.meta["choices"])
    return click.option(*flags, field.name, **kwargs)


def settings_options(cls: type) -> Callable[[F], F]:
    """Decorator: one click option per field of `cls`, passed as keyword arguments named after the fields."""
    def decorate(func: F) -> F:
        for field in reversed(fields_of(cls)):
            func = option_for(field)(func)
        return func
    return decorate


def given(cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pops the settings options out of a command's keyword arguments."""
    return {f.name: kwargs.pop(f.name) for f in fields_of(cls)}
