"""The Python API's words: unknown keywords as Python words them, and errors in keywords.

The engine's messages name `dane train` flags (`pass --resume`, `--local-lr must be ...`),
as the command line shows them; a notebook user passed keywords, so the API words the same
sentence with them (`pass resume=True`, `local_lr must be ...`). The CLI never comes here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from .algorithms.parts.setting_error import FIELD_OF_KEY, KEY_NAMES, SettingError, key_of
from .setup.config import KEYS, SECTIONS, VALUE_TYPES

# Flags that take no value on the command line: as keywords they read `name=True`.
_SWITCHES = {"resume", "force", "skip_bad"}
# `--name VALUE` after these words gives a value to pass (`pass --batch-size 8`, `or --path DIR`).
_VERBS = {"pass", "use", "needs", "or"}
# Words that follow a flag in prose and are not its value (`pass --out to ...`).
_PROSE = {"to", "or", "and", "a", "the", "of", "is", "in", "with", "for", "must", "not"}
_FLAG = re.compile(r"(?<![\w`-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?: ([^\s,;)`]+))?")
# The names `**settings` may hold: the settings' keys (the flags' names: local_momentum), their
# former names (the fields', momentum: check_settings notes them), and the section tables.
SETTINGS_KEYWORDS = {*KEYS, *VALUE_TYPES, *SECTIONS}


def check_keywords(
    given: Iterable[str], known: set[str], function: str, *, named: Iterable[str] = ()
) -> None:
    """TypeError for the first keyword `function` does not take, naming the closest one of
    `known` and `named` (the function's own parameters, which `given` cannot hold); a
    setting's former name is accepted, never offered."""
    for name in given:
        if name in known:
            continue
        close = difflib.get_close_matches(name, sorted({*known, *named} - KEY_NAMES.keys()), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; see help({function})"
        raise TypeError(f"{function}() got an unexpected keyword argument {name!r}{hint}")


def in_keywords(err: BaseException) -> str:
    """`err`'s message with the settings it names worded as the API's keywords."""
    # A SettingError is worded from its marks (RunConfig's, which str() words in flags, too).
    text = err.worded(_as_keyword) if isinstance(err, SettingError) else str(err)
    return _flags_as_keywords(text)


def _as_keyword(name: str, value: str | None) -> str:
    """A field as the API's keyword: `local_momentum`, `local_momentum=0.5` (key_of)."""
    return key_of(name) if value is None else f"{key_of(name)}={value}"


def reword(err: BaseException) -> None:
    """Word `err` (in place: its type and traceback stay) with keywords, not flags."""
    err.args = (in_keywords(err), *err.args[1:])


def _flags_as_keywords(text: str) -> str:
    """`--local-lr` -> `local_lr`, `pass --resume` -> `pass resume=True`, `pass --batch-size 8`
    -> `pass batch_size=8`; a `dane ...` command in backticks is left as the CLI reads it."""
    pieces = text.split("`")
    # Even pieces stand outside backticks; odd ones are commands to type: kept as written.
    pieces[::2] = [_FLAG.sub(_keyword, piece) for piece in pieces[::2]]
    return "`".join(pieces)


def _keyword(match: re.Match[str]) -> str:
    name, value = match.group(1).replace("-", "_"), match.group(2)
    if name in _SWITCHES or VALUE_TYPES.get(FIELD_OF_KEY.get(name, name)) is bool:
        return f"{name}=True" + (f" {value}" if value else "")
    before = match.string[: match.start()].split()
    if value and (_is_number(value) or (before and before[-1] in _VERBS and value not in _PROSE)):
        return f"{name}={value}"
    return name + (f" {value}" if value else "")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
