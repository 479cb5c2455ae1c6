"""The click exceptions typer raises, read in one place.

typer 0.12–0.15 runs on the `click` package; later releases carry their own copy of
click as the private `typer._click`. The CLI catches click's usage errors to print
them as one line, so it needs their classes from whichever is there.
"""

from __future__ import annotations

import importlib
import re
from typing import Any


def _exception(name: str) -> Any:
    """Click's exception class `name`, from typer's copy of click or from click (typed
    loosely: the two copies' classes are not the same type)."""
    for module in ("typer._click.exceptions", "typer.exceptions", "click.exceptions"):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if isinstance(found, type) and issubclass(found, BaseException):
            return found
    raise ImportError(f"no click exception {name!r} in typer or click")


UsageError = _exception("UsageError")
NoSuchOption = _exception("NoSuchOption")
_TyperAbort = _exception("Abort")

USAGE_ERRORS: tuple[type[Exception], ...] = (UsageError,)
ABORTS: tuple[type[BaseException], ...] = (_TyperAbort, KeyboardInterrupt)

_NO_SUCH_COMMAND = re.compile(r"No such command '(?P<name>[^']*)'")


def message_of(exc: Exception) -> str:
    """The usage error's own message, without click's list of possibilities."""
    return str(getattr(exc, "message", None) or exc)


def context_of(exc: Exception) -> Any:
    """The click context the error arose in (its `command_path`), or None."""
    return getattr(exc, "ctx", None)


def unknown_option(exc: Exception) -> tuple[str, list[str]] | None:
    """(the option given, the command's options) when `exc` is an unknown option."""
    if not isinstance(exc, NoSuchOption):
        return None
    ctx = context_of(exc)
    known = (
        [opt for param in ctx.command.params for opt in getattr(param, "opts", ())]
        if ctx is not None
        else list(getattr(exc, "possibilities", None) or ())
    )
    return getattr(exc, "option_name", ""), known


def unknown_command(exc: Exception) -> str | None:
    """The command name given when `exc` says there is no such command."""
    match = _NO_SUCH_COMMAND.search(message_of(exc))
    return match["name"] if match else None


def subcommands(ctx: Any) -> list[str]:
    """The names of the commands under `ctx`'s command."""
    command = ctx.command
    return list(command.list_commands(ctx)) if hasattr(command, "list_commands") else []
