"""SettingError: a bad setting, its message naming the settings by their field names.

A message marks each setting it names with `setting("grad_sample")`, or `setting("mu", 0.01)`
for a value to give it. str(error) then names the fields (`mu=0.01`), as RunConfig takes
them; `error.worded(namer)` words the same sentence for another surface, so that the command
line names its flags (`--mu 0.01`, config.in_flags) and the Python API its keywords (`key_of`,
keywords.py). `setting(name, with_flag=True)` shows the flag beside the field in str(error)
too (`local_tol (--local-tol)`), where callers match on it.
"""

from __future__ import annotations

from collections.abc import Callable

_MARK = "\x1f"  # brackets a setting's name (and value) inside the message; never shown
_WITH_FLAG = "+"  # leads a marked name whose flag str(error) shows beside it

# How a surface names a setting: (field name, value as text or None) -> words.
Namer = Callable[[str, str | None], str]


def setting(name: str, value: object = None, *, with_flag: bool = False) -> str:
    """A setting named in a SettingError's message (with the value to give it, if any)."""
    return f"{_MARK}{_WITH_FLAG if with_flag else ''}{field_name(name, value)}{_MARK}"


# Flags spelled otherwise than their field: the local solver's settings share the --local-
# prefix on the command line. The TOML keys and the API's keywords follow the flags
# (local_momentum, `key_of`); the fields keep their names inside the engine.
FLAG_NAMES = {
    "lr_schedule": "--local-lr-schedule",
    "lr_warmup": "--local-lr-warmup",
    "lr_warmup_epochs": "--local-lr-warmup-epochs",
    "lr_scaling": "--local-lr-scaling",
    "lr_reference_batch": "--local-lr-reference-batch",
    "momentum": "--local-momentum",
}
# The flags above that were once spelled as their field (--lr-schedule): that spelling still
# parses, hidden (cli/options.py). The others were born with the prefix.
RENAMED_FLAGS = frozenset({"lr_schedule", "lr_warmup", "momentum"})


def flag(name: str, value: str | None = None) -> str:
    """The `dane train` flag of a field (local_lr -> --local-lr), with its value if given."""
    option = FLAG_NAMES.get(name) or former_flag(name)
    return option if value is None else f"{option} {value}"


def key_of(name: str) -> str:
    """A field's TOML key and API keyword: its flag without the dashes (momentum ->
    local_momentum, local_lr -> local_lr)."""
    return flag(name).removeprefix("--").replace("-", "_")


# The keys spelled otherwise than their field (local_momentum: momentum), and the reverse. A
# field's own name is such a key's former name: config.toml files and presets written before
# the keys followed the flags hold it, and it still reads (config.check_settings).
KEY_NAMES = {name: key_of(name) for name in FLAG_NAMES}
FIELD_OF_KEY = {key: name for name, key in KEY_NAMES.items()}


def former_flag(name: str) -> str:
    """The flag a field's name spells (momentum -> --momentum): RENAMED_FLAGS' hidden aliases."""
    return "--" + name.replace("_", "-")


def field_name(name: str, value: object) -> str:
    """The Python wording: `mu`, `mu=0.01`."""
    return name if value is None else f"{name}={value}"


class SettingError(ValueError):
    """A bad setting or combination of settings; the message says how to fix it."""

    # True: str() names the settings as flags (`--mu 0.01`), as RunConfig.validate's errors do.
    in_flags = False

    def __str__(self) -> str:
        return self.worded(flag) if self.in_flags else self._render(field_name, flags_too=True)

    def worded(self, namer: Namer) -> str:
        """The message with each marked setting named by `namer`."""
        return self._render(namer, flags_too=False)

    def _render(self, namer: Namer, *, flags_too: bool) -> str:
        parts = str(self.args[0] if self.args else "").split(_MARK)
        for i in range(1, len(parts), 2):
            marked = parts[i]
            both = marked.startswith(_WITH_FLAG)
            name, given, value = marked.removeprefix(_WITH_FLAG).partition("=")  # names hold no "="
            parts[i] = namer(name, value if given else None)
            if both and flags_too:
                parts[i] += f" ({flag(name, value if given else None)})"
        return "".join(parts)
