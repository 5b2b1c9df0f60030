"""Sphinx directives that render the reference from the code, at build time, so that it
cannot drift: `dane-cli` (every `dane` command from the Typer app, the lazily built `train`
and `dane bench ...` included), `dane-settings` (every TOML key, from the settings'
declarations) and `dane-presets` (the shipped presets, with their purpose).
`commands()` is the walk the directive and tests/docs/test_docs_site.py share.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import click
import typer
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _real(command: click.Command) -> click.Command:
    """The command a lazy stand-in (cli/lazy.py) is for; any other command as it is."""
    real = getattr(command, "real", None)
    return real() if callable(real) else command


def commands() -> Iterator[tuple[list[str], click.Command, click.Context]]:
    """Every command of `dane` as (its words, the command, a context to format it in),
    groups before their commands, in the order `--help` lists them."""
    from dask_dane.cli import app

    root = typer.main.get_command(app)

    def walk(words: list[str], command: click.Command, parent: click.Context | None):
        # Typer carries its own copy of click: its classes, not click's, are the app's.
        ctx = command.context_class(command, info_name=words[-1], parent=parent)
        yield words, command, ctx
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    yield from walk([*words, name], _real(sub), ctx)

    yield from walk(["dane"], root, None)


def options_of(command: click.Command, ctx: click.Context) -> list[tuple[str, str]]:
    """(the option's spellings and metavar, its help with the default) for every parameter
    a command takes: those `dane train --help` leaves to `dane options` included, its hidden
    former spellings (--momentum) left out, as they are there."""
    from dask_dane.cli.option_list import every_record

    records = []
    for param in command.get_params(ctx):
        if param.name == "help":  # every command has it; listing it 27 times says nothing
            continue
        record = every_record(param, ctx)
        if param.param_type_name == "argument" and record is None:
            record = (param.make_metavar(ctx), getattr(param, "help", None) or "")
        if record is not None:
            records.append(record)
    return records


def _section(words: list[str], command: click.Command, ctx: click.Context) -> nodes.section:
    name = " ".join(words)
    section = nodes.section(ids=[nodes.make_id(name)], names=[nodes.fully_normalize_name(name)])
    section += nodes.title(name, name)
    for text in inspect.cleandoc(command.help or "").split("\n\n"):
        if text.strip():
            section += nodes.paragraph(text, " ".join(text.split()))
    usage = command.get_usage(ctx)
    section += nodes.literal_block(usage, usage)
    items = nodes.definition_list()
    for spelling, help_text in options_of(command, ctx):
        item = nodes.definition_list_item()
        item += nodes.term("", "", nodes.literal(spelling, spelling))
        item += nodes.definition("", nodes.paragraph(help_text, help_text))
        items += item
    if len(items):
        section += items
    return section


class DaneCli(SphinxDirective):
    """`dane-cli`: one section per command, nested as the commands are."""

    def run(self) -> list[nodes.Node]:
        sections: dict[tuple[str, ...], nodes.section] = {}
        top: list[nodes.Node] = []
        for words, command, ctx in commands():
            section = _section(words, command, ctx)
            parent = sections.get(tuple(words[:-1]))
            if parent is not None and len(words) > 2:
                parent += section  # `dane bench NAME` under `dane bench`
            else:
                top.append(section)
            sections[tuple(words)] = section
        return top


def _table(header: list[str], rows: list[list[str]], code: int) -> nodes.table:
    """A table whose first `code` columns are literals and the rest prose, the prose the
    widest (a long help text would otherwise push the table past the page)."""
    group = nodes.tgroup(cols=len(header))
    group += [nodes.colspec(colwidth=2 if i < code else 6) for i in range(len(header))]

    def row(cells: list[str], literal_upto: int) -> nodes.row:
        line = nodes.row()
        for i, text in enumerate(cells):
            inner = nodes.literal(text, text) if i < literal_upto else nodes.Text(text)
            line += nodes.entry("", nodes.paragraph("", "", inner))
        return line

    group += nodes.thead("", row(header, 0))
    group += nodes.tbody("", *(row(cells, code) for cells in rows))
    return nodes.table("", group, classes=["colwidths-given", "dane-reference"])


class DaneSettings(SphinxDirective):
    """`dane-settings`: every key a `--config` TOML file may hold, by section."""

    def run(self) -> list[nodes.Node]:
        import dataclasses

        from dask_dane.cli.options import ARGUMENTS
        from dask_dane.pipeline.algorithms.parts.hyperparameters import shown_default
        from dask_dane.pipeline.algorithms.parts.setting_error import flag, key_of
        from dask_dane.pipeline.setup.config import SECTIONS

        rows = []
        for section, cls in SECTIONS.items():
            for f in dataclasses.fields(cls):
                declared = f.metadata.get("declaration")
                if declared is not None:
                    shown = shown_default(declared.default) or "unset"
                    option = "STORE" if f.name in ARGUMENTS else flag(f.name)
                    rows.append([key_of(f.name), option, section, shown, declared.help])
        header = ["key", "dane train", "section", "default", "what it sets"]
        return [_table(header, rows, code=4)]


class DanePresets(SphinxDirective):
    """`dane-presets`: the shipped presets and scripts, as `dane presets` lists them."""

    def run(self) -> list[nodes.Node]:
        from dask_dane.presets import RECOMMENDED, list_presets

        shipped = sorted(list_presets(), key=lambda p: p.name not in RECOMMENDED)
        kinds = {"settings": "dane train", "runs": "dane bench train", "script": "script"}
        rows = [
            [p.name, "your case" if p.name in RECOMMENDED else kinds[p.kind], p.purpose]
            for p in shipped
        ]
        return [_table(["name", "use", "purpose"], rows, code=1)]


def setup(app: Sphinx) -> dict[str, object]:
    """Register the directives."""
    app.add_directive("dane-cli", DaneCli)
    app.add_directive("dane-settings", DaneSettings)
    app.add_directive("dane-presets", DanePresets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
