"""`dane` command lines in the docs, parsed against the real click commands without running
them (tests/docs/test_docs.py). A line's placeholders (STORE, OUT.json, $S, <DIR>, ...) stand in
for values the reader supplies: a placeholder given to a typed option is swapped for a value
of that type, so the rest of the line is still checked; a line that still cannot be parsed
because of a placeholder is reported as skipped, never as passed.

Typer 0.29 carries its own copy of click (typer._click): its commands, parameters and
exceptions are that copy's, so they are imported from there, not from click."""

from __future__ import annotations

import contextlib
import enum
import io
import itertools
import re
import shlex
import typing
from collections.abc import Iterator
from dataclasses import dataclass

import typer
from doc_checks import code_spans, fenced_blocks  # beside it in tests/
from typer._click import exceptions as cx
from typer._click.core import Command, Parameter
from typer.core import TyperGroup, TyperOption

from dask_dane.pipeline.algorithms import SETTINGS

# A reader's value: capitals (STORE, OUT.json, FILE.py:NAME, GBPS,MS), <DIR>, $VAR, "...".
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:[.,:/=-][A-Za-z0-9_]+)*$|<[^>]+>|\$|\.\.\.|…")
SUBSTITUTION = re.compile(r"\$\((dane\s[^)]*)\)")
# A synopsis' alternatives, iid|label-skew|dirichlet: the first one stands for them all.
ALTERNATIVES = re.compile(r"(?<=[\w-])(?:\|[\w.-]+)+")
SHELL_WORDS = {"time", "exec", "nohup", "sudo", "command"}
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}
DRAWING = re.compile("[\u2500-\u25ff]")  # box drawing and arrows: a diagram, not a shell
ALGORITHM_CLASS = re.compile(r"name: ClassVar\[str\] = \"([\w-]+)\"")


@dataclass(frozen=True)
class Outcome:
    """A line's verdict: `bad` names a real break, `skipped` a placeholder in the way."""

    status: str  # "ok", "bad" or "skipped"
    reason: str = ""


def is_placeholder(token: str) -> bool:
    return bool(PLACEHOLDER.search(token))


def logical_lines(lines: list[str], start: int) -> Iterator[tuple[int, str]]:
    """A block's lines with `\\` continuations joined, each with the line it starts on."""
    held: list[str] = []
    first = start
    for number, line in enumerate(lines, start):
        if not held:
            first = number
        if line.rstrip().endswith("\\"):
            held.append(line.rstrip()[:-1])
            continue
        yield first, " ".join([*held, line])
        held = []
    if held:
        yield first, " ".join(held)


def dane_argvs(line: str) -> list[list[str]]:
    """The argument lists of every `dane` the shell line runs, `$(dane ...)` included."""
    inner = [m.group(1) for m in SUBSTITUTION.finditer(line)]
    line = SUBSTITUTION.sub("X", ALTERNATIVES.sub("", line)).replace("[", "").replace("]", "")
    # <DIR> is the reader's value, not a redirection: written as the capitals it stands for.
    line = re.sub(r"<([A-Za-z][\w-]*)>", lambda m: m.group(1).upper(), line)
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unclosed quote: a line of prose or of another language
        return []
    found: list[list[str]] = []
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token and all(c in lexer.punctuation_chars for c in token):  # ; && | > ( )
            found.extend(_dane_call(segment))
            segment = []
        else:
            segment.append(token)
    for text in inner:
        found.extend(dane_argvs(text))
    return found


def _dane_call(words: list[str]) -> list[list[str]]:
    """[argv] if this simple command runs `dane` (after VAR=value and `time`), else []."""
    while words and (re.match(r"^[A-Za-z_]\w*=", words[0]) or words[0] in SHELL_WORDS):
        words = words[1:]
    if words and (words[0] == "dane" or words[0].endswith("/dane")):
        argv = words[1:]
        while argv and argv[-1] in ("...", "…"):  # "and more options": nothing to check
            argv.pop()
        return [argv]
    return []


def doc_commands(text: str) -> Iterator[tuple[int, list[str], bool]]:
    """(line, argv, inline) for each `dane` call: fenced lines, and code spans that start
    with `dane ` (inline: a span may name a command without its required arguments)."""
    for start, language, block in fenced_blocks(text):
        drawing = any(DRAWING.search(line) for line in block)
        if language not in SHELL_BLOCKS or drawing:  # Python, TOML; a diagram's labels
            continue
        for number, line in logical_lines(block, start):
            for argv in dane_argvs(line):
                yield number, argv, False
    for number, span in code_spans(text):
        if span.startswith("dane ") or span == "dane":
            for argv in dane_argvs(span)[:1]:
                yield number, argv, True


def _parse(
    command: Command, name: str, args: list[str], parent: typer.Context | None = None
) -> None:
    """make_context down the chain of groups: unknown commands and options, and values the
    option's type refuses, fail; no command's body runs."""
    ctx = command.make_context(name, list(args), parent=parent)
    if isinstance(command, TyperGroup):
        rest = [*ctx._protected_args, *ctx.args]
        if rest:
            sub_name, sub, sub_args = command.resolve_command(ctx, rest)
            assert sub is not None and sub_name is not None  # resolve_command raised otherwise
            _parse(sub, sub_name, sub_args, ctx)


def _sample(param: Parameter) -> str | None:
    """A value the param's annotation accepts, to stand for a placeholder."""
    kind = param.type_descriptor.annotation  # type: ignore[attr-defined]
    if typing.get_origin(kind) is list:
        kind = typing.get_args(kind)[0]
    if typing.get_origin(kind) is typing.Literal:
        return str(typing.get_args(kind)[0])
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return str(next(iter(kind)).value)
    if kind in (int, float):
        low = getattr(param, "min", None)
        return str(low + 1 if low is not None else 1)
    return "true" if kind is bool else None


def _swap_placeholder(argv: list[str], err: cx.BadParameter) -> list[str] | None:
    """argv with the placeholder err complains of replaced by a valid value; None if the
    offending value is no placeholder (a real break) or cannot be found."""
    param = err.param
    sample = _sample(param) if isinstance(param, TyperOption) else None
    if param is None or sample is None:
        return None
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=")
        if flag not in param.opts + param.secondary_opts:
            continue
        if eq and is_placeholder(value):
            return [*argv[:i], f"{flag}={sample}", *argv[i + 1 :]]
        if not eq and i + 1 < len(argv) and is_placeholder(argv[i + 1]):
            return [*argv[: i + 1], sample, *argv[i + 2 :]]
    return None


def check_argv(group: Command, argv: list[str], *, inline: bool) -> Outcome:
    """Parse `dane ARGV`; placeholders given to typed options are swapped and parsed again."""
    for _ in range(len(argv) + 1):
        try:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                _parse(group, "dane", argv)
            return Outcome("ok")
        except (typer.Exit, cx.NoArgsIsHelpError):  # --help, --version; a group alone
            return Outcome("ok")
        except cx.NoSuchOption as err:
            return Outcome("bad", err.format_message())
        except cx.MissingParameter as err:
            if inline:  # prose may name a command without its arguments
                return Outcome("ok")
            return _blame(argv, err.format_message())
        except cx.BadParameter as err:
            swapped = _swap_placeholder(argv, err)
            if swapped is None:
                return _blame(argv, err.format_message(), err.param)
            argv = swapped
        except cx.UsageError as err:
            message = err.format_message()
            if inline and "requires an argument" in message and argv[-1].startswith("-"):
                return Outcome("ok")  # prose naming a flag: `dane train --scheduler`
            return _blame(argv, message)
    return Outcome("skipped", "placeholders kept it from parsing")


def _blame(argv: list[str], message: str, param: Parameter | None = None) -> Outcome:
    """A failure is a break, unless a placeholder the message names (an unknown command
    COMMAND, an extra argument OUT) or a positional argument's placeholder is the cause."""
    named = re.findall(r"'([^']*)'|\(([^)]*)\)", message)
    words = [w for pair in named for w in (pair[0] or pair[1]).split()]
    if any(is_placeholder(w) for w in words):
        return Outcome("skipped", message)
    positional = param is not None and not isinstance(param, TyperOption)
    if positional and any(is_placeholder(a) for a in argv):
        return Outcome("skipped", message)
    return Outcome("bad", message)


def all_commands(command: Command) -> Iterator[Command]:
    """Every command under a group, lazy stand-ins built (cli/lazy.py)."""
    real = getattr(command, "real", None)
    command = real() if callable(real) else command
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from all_commands(sub)


@contextlib.contextmanager
def paths_need_not_exist(group: Command) -> Iterator[None]:
    """The docs name files the reader makes (a JSON a benchmark writes): while checking,
    `exists=True` paths accept any path; the parameters are restored after."""
    infos = [
        info
        for command in all_commands(group)
        for p in command.params
        if getattr(info := p.type_descriptor.parameter_info, "exists", False)  # type: ignore[attr-defined]
    ]
    for info in infos:
        info.exists = False
    try:
        yield
    finally:
        for info in infos:
            info.exists = True


def algorithm_named(argv: list[str]) -> str | None:
    """The value of --algorithm in argv, if any."""
    for i, token in enumerate(argv):
        if token.startswith("--algorithm="):
            return token.partition("=")[2]
        if token == "--algorithm" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def check_line(
    group: Command, argv: list[str], *, inline: bool, registered: set[str], page: str
) -> Outcome:
    """check_argv, and --algorithm must name a registered algorithm: the command line takes
    any string there and only the run refuses it. An algorithm the page itself defines (a
    plugin's example, whose options exist once it is registered) is skipped, not passed."""
    algorithm = algorithm_named(argv)
    if algorithm and algorithm not in registered and not is_placeholder(algorithm):
        if algorithm in ALGORITHM_CLASS.findall(page):
            return Outcome("skipped", f"{algorithm!r} is this page's example plugin")
        return Outcome("bad", f"no algorithm named {algorithm!r}")
    refused = _refused_setting(argv)
    return Outcome("bad", refused) if refused else check_argv(group, argv, inline=inline)


def _refused_setting(argv: list[str]) -> str | None:
    """The message of the first string-valued algorithm setting whose declared rule refuses
    its value (`--correction shrnk`): typer takes them as plain strings, the run's rules
    choose (pipeline/algorithms/parts/checks.py, one_of)."""
    if argv[:1] != ["train"]:
        return None
    for flag, value in itertools.pairwise(argv):
        gathered = SETTINGS.get(flag.removeprefix("--").replace("-", "_"))
        rule = gathered.declaration.rule if gathered and flag.startswith("--") else None
        if rule is None or gathered.type is not str or is_placeholder(value):
            continue
        try:
            rule(gathered.name, value)
        except ValueError as err:
            return str(err)
    return None
