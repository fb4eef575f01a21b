"""Commands whose modules load only when they run, so that `mtrl` starts without every command's libraries.

A ``LazyCommand`` stands in its group under the command's name and one-line help, which is all a listing
(`mtrl --help`) or a typo suggestion needs. Asked to parse arguments, it imports its module and hands over to the real
command, the one Typer builds from the module's function or Typer app: `mtrl validate --help` and `mtrl validate
FILE` behave exactly as if the function were registered directly.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import typer
import typer.core
import typer.main

# Help and usage errors in click's plain layout: Typer's Rich layout (typer.rich_utils) imports rich's Markdown renderer
# and markdown-it whatever the markup mode, about 0.3 CPU-s, more than the rest of `mtrl --help` together (issue 38).
HELP_MARKUP: typer.core.MarkupMode = None


class LazyCommand(typer.core.TyperCommand):
    """``target`` is ``"module:attribute"``: a command function or a ``typer.Typer`` group.

    ``subcommands`` (for a group) are more lazy commands added in front of the group's own.
    """

    def __init__(self, name: str, target: str, help: str, subcommands: Sequence[LazyCommand] = ()) -> None:
        # The whole line in `mtrl --help` (click would cut it at 45 characters), wrapped to the terminal's width.
        super().__init__(name, help=help, short_help=" ".join(help.split()))
        self.target = target
        self.subcommands = tuple(subcommands)
        self._real: Any = None

    def real(self) -> Any:
        """The command itself (its module imported on the first call)."""
        if self._real is None:
            module_name, _, attribute = self.target.partition(":")
            self._real = _click_command(str(self.name), getattr(importlib.import_module(module_name), attribute))
            if self.subcommands:
                group: Any = self._real
                group.commands = {**{command.name: command for command in self.subcommands}, **group.commands}
        return self._real

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        # The context made is the real command's, so invoking it (what a group does next) runs the real command.
        return self.real().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        return self.real().invoke(ctx)


def _click_command(name: str, target: Any) -> Any:
    """The command Typer builds for ``target`` registered as ``name`` in a group like `mtrl`'s."""
    holder = typer.Typer(add_completion=False, rich_markup_mode=HELP_MARKUP)
    holder.callback()(_no_options)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
    group: Any = typer.main.get_command(holder)
    return group.commands[name]


def _no_options() -> None:
    """(The holder group's callback: a group with a callback keeps its commands' own names and settings.)"""
