"""Commands built only when they run: `dane --help` lists them without importing torch.

`dane train`'s options are generated from the settings' declarations (every algorithm
module; torch-free, as the algorithms import torch inside the functions that compute), and
`dane bench`'s commands import their benchmarks, which import torch: `dane --help` need
wait for neither, nor `dane bench --help` for the benchmarks (cli/options.py BenchCommands,
each listed from bench/app.py). A LazyCommand stands in for such a command in its group: the
listing needs only its help; resolving it (to run it or to show its own --help) builds the
real command, which keeps its own help, and so does reading its params.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import click
from typer.core import TyperCommand


class LazyCommand(TyperCommand):
    """A command listed by its help alone; `load()` builds the real one on first use.

    A TyperCommand, as the commands it stands for are: Typer carries its own copy of click,
    whose listing shortens a help text otherwise than click's does ("1, 2, 4..." is a
    sentence's end to one of them), and the listing must read as the real commands' would.
    """

    def __init__(
        self,
        name: str,
        *,
        help: str,
        load: Callable[[], click.Command],
        rich_help_panel: str | None = None,
    ) -> None:
        super().__init__(name, help=help, rich_help_panel=rich_help_panel)
        self._load = load
        self._real: click.Command | None = None

    def real(self) -> click.Command:
        """The command itself, built once."""
        if self._real is None:
            self._real = self._load()
            # The real command keeps its own help: the stand-in's may be only the line the
            # listing shows (a benchmark's), and `dane NAME --help` must show all of it.
            self._real.name = self.name
        return self._real

    @property
    def params(self) -> list[click.Parameter]:  # type: ignore[override]
        """The real command's params (what a test or a doc tool reads), built on first use."""
        return self.real().params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        """click.Command.__init__ sets an empty list: a stand-in has no params of its own."""


class LazyCommands:
    """A click.Group mixin: `lazy` stand-ins placed among the group's commands in `order`,
    swapped for the real command when the command line names them."""

    lazy: tuple[LazyCommand, ...] = ()
    order: tuple[str, ...] = ()  # the listing's order; commands not named in it come last

    commands: MutableMapping[str, click.Command]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        given = {**self.commands, **{c.name: c for c in self.lazy if c.name}}
        first = [name for name in self.order if name in given]
        self.commands = {name: given[name] for name in [*first, *given] if name}

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """The named command; a stand-in is replaced by the command it stands for."""
        name, command, rest = super().resolve_command(ctx, args)  # type: ignore[misc]
        if isinstance(command, LazyCommand):
            command = command.real()
        return name, command, rest
