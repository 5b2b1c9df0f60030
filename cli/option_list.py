"""Which `dane train` options its --help shows, and `dane options`, which lists them all.

`dane train` takes one option per RunConfig field (cli/options.py), near 80 of them, most
research knobs a run seldom sets (--grad-sample-growth, --server-momentum-delay-epochs): listed
beside the dozen a run needs, they filled 230 lines of --help. Its --help shows SHOWN alone;
every other option is hidden there and parses as before, and `dane options [--filter TEXT]`
lists every option with its panel, default and help, as --help words them.
"""

from __future__ import annotations

import copy
import difflib

import click

# The settings `dane train --help` shows, each panel's in the order a run reaches for them: what
# the README, the tutorials and the how-tos pass (--out, --rounds, --config, --workers and
# --batch-size the most), and what a first run changes (the model, the algorithm and DANE's mu,
# the local steps and their rate, the images' augmentation, where it runs).
SHOWN = (
    "store", "model", "augment",
    "algorithm", "mu",
    "local_steps", "local_epochs", "local_lr", "batch_size",
    "config", "rounds", "out", "resume", "seed",  # config, resume: train's own, ranked here
    "workers", "device", "scheduler", "cluster",
)  # fmt: skip

FORMER = "__former"  # the suffix of a former spelling's parameter (options.run_config_parameters)
Record = tuple[str, str]  # an option's spelling and metavar, its help with the default


def shown_first(panel: list[tuple[str, Record]]) -> list[Record]:
    """A panel's (parameter name, record) pairs as --help lists them: in SHOWN's order."""
    rank = {name: i for i, name in enumerate(SHOWN)}
    return [record for name, record in sorted(panel, key=lambda p: rank.get(p[0], len(rank)))]


def every_record(param: click.Parameter, ctx: click.Context) -> Record | None:
    """A parameter's help record as --help would show it were it shown; None for the hidden
    former spellings (--momentum) and --help, which every command has. Only `dane train`
    (ctx.command's `listed_apart`) hides options that are listed here: another command's
    hidden options are aliases, and stay out."""
    name = param.name or ""
    if name == "help" or name.endswith(FORMER):
        return None
    if param.param_type_name == "argument" or not getattr(ctx.command, "listed_apart", False):
        return param.get_help_record(ctx)
    shown = copy.copy(param)
    shown.hidden = False  # type: ignore[attr-defined]  # an Option's: the record, not the flag
    return shown.get_help_record(ctx)


def by_panel(command: click.Command, ctx: click.Context) -> dict[str, list[Record]]:
    """Every option of `command`, hidden or not, under its --help panel (config.PANELS)."""
    from ..pipeline.setup.config import PANELS

    panels: dict[str, list[Record]] = {name: [] for name in PANELS}
    for param in command.get_params(ctx):
        record = every_record(param, ctx)
        if record is not None:
            panel = getattr(param, "rich_help_panel", None) or PANELS[0]  # STORE: Data's
            panels.setdefault(panel, []).append(record)
    return {title: records for title, records in panels.items() if records}


def _matches(title: str, record: Record, text: str) -> bool:
    """Whether `text` is in the option's spelling (a TOML key's _ read as -), help or panel."""
    spelling, help_text = record
    text = text.lower()
    return any(
        text in place.lower() for place in (spelling, spelling.replace("-", "_"), help_text, title)
    )


def options_listing(command: click.Command, text: str | None = None) -> str:
    """`dane options`: every option of `command` by panel, or those `text` matches (in its
    flag, its help or its panel's title); ValueError where none does, naming the closest."""
    ctx = command.context_class(command, info_name=command.name)
    panels = by_panel(command, ctx)
    if text:
        panels = {
            title: kept
            for title, records in panels.items()
            if (kept := [r for r in records if _matches(title, r, text)])
        }
        if not panels:
            raise ValueError(_no_match(text, by_panel(command, ctx)))
    formatter = ctx.make_formatter()
    formatter.write_text(_heading(command, ctx, panels, text))
    for title, records in panels.items():
        with formatter.section(title):
            formatter.write_dl(records)
    return formatter.getvalue().rstrip("\n")


def _heading(
    command: click.Command, ctx: click.Context, panels: dict[str, list[Record]], text: str | None
) -> str:
    """What the listing holds: how many options, how many of them --help shows, what matched."""
    every = [param for param in command.get_params(ctx) if every_record(param, ctx)]
    shown = sum(1 for param in every if param.get_help_record(ctx) is not None)
    listed = sum(map(len, panels.values()))
    which = f"{listed} of {len(every)} options hold {text!r}" if text else f"{listed} options"
    return (
        f"`dane {command.name}`: {which} ({shown} in its --help), by panel, defaults in [ ]. "
        "Each setting is also a --config key: its flag without the dashes (local_lr = 0.05)."
    )


def _no_match(text: str, panels: dict[str, list[Record]]) -> str:
    """The error of a filter no option matches, with the flag closest to it."""
    flags = [spelling.split()[0] for records in panels.values() for spelling, _ in records]
    close = difflib.get_close_matches("--" + text.lstrip("-").replace("_", "-"), flags, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"no option's flag, help or panel holds {text!r}{hint} (`dane options` lists them all)"
