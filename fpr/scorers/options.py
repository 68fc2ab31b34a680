"""Scorer options, declared by each scorer and checked in one place.

A scorer lists its options as :class:`Option` records (name, type, default, help, and
optionally the allowed choices or a lowest value). Users pass them as
``--scorer-option <scorer>.<name>=<value>`` (``scorer_options={...}`` in Python).
:func:`check_options` runs before any image is embedded: an option of a scorer that
is not in the run, an unknown option name or a value of the wrong type is one line
naming the valid choices. :func:`resolve` returns the typed values, defaults filled,
so a default is written once, in the declaration.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from fpr.errors import InputError, choices_hint

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise ValueError(raw)


_TYPE_NAMES = {int: "an integer", float: "a number", str: "text", bool: "true or false"}


@dataclass(frozen=True)
class Option:
    """One option of a scorer: ``<scorer>.<name>``."""

    name: str
    type: type  # int, float, str or bool
    default: Any  # None: no default (the scorer decides, e.g. from the environment)
    help: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    parse: Callable[[Any], Any] | None = None  # custom parser (raises ValueError on a bad value)

    def value(self, scorer: str, raw: Any) -> Any:
        if raw is None or (isinstance(raw, str) and raw.strip() == "" and self.type is not str):
            return self.default
        try:
            if self.parse is not None:
                value = self.parse(raw)
            elif self.type is bool:
                value = _boolean(raw)
            else:
                value = self.type(raw.strip() if isinstance(raw, str) else raw)
        except (TypeError, ValueError):
            raise InputError(f"scorer option {scorer}.{self.name} must be {_TYPE_NAMES.get(self.type, self.type)}, "
                             f"got '{raw}'", hint=self.help) from None
        if self.choices is not None and value not in self.choices:
            raise InputError(f"scorer option {scorer}.{self.name} must be one of {', '.join(self.choices)}, "
                             f"got '{raw}'")
        if self.minimum is not None and value < self.minimum:
            raise InputError(f"scorer option {scorer}.{self.name} must be >= {self.minimum:g}, got '{raw}'")
        return value

    def describe(self) -> str:
        default = "none" if self.default is None else str(self.default)
        allowed = f"; one of {', '.join(self.choices)}" if self.choices else ""
        return f"{self.help} ({self.type.__name__}, default {default}{allowed})"


def split_key(key: str) -> tuple[str, str]:
    scorer, dot, name = str(key).partition(".")
    if not dot or not scorer or not name:
        raise InputError(f"scorer option '{key}' must be written <scorer>.<name>=<value>",
                         hint="e.g. --scorer-option copy-paste.threshold=0.7")
    return scorer, name


def check_options(declared: Mapping[str, Sequence[Option]], options: Mapping[str, Any] | None) -> None:
    """Every key names a scorer of the run and one of its declared options, with a valid value.

    ``declared``: scorer name -> its options, for the scorers the run uses.
    """
    for key, raw in (options or {}).items():
        scorer, name = split_key(key)
        if scorer not in declared:
            raise InputError(f"scorer option '{key}' is for scorer '{scorer}', which this run does not use",
                             hint=choices_hint(sorted(declared), "scorers in this run") if declared
                             else "add the scorer with --scorers, or drop the option")
        by_name = {o.name: o for o in declared[scorer]}
        if name not in by_name:
            raise InputError(f"scorer '{scorer}' has no option '{name}'",
                             hint=choices_hint(sorted(by_name), "options") if by_name
                             else f"'{scorer}' takes no options")
        by_name[name].value(scorer, raw)


def resolve(scorer: str, declared: Sequence[Option], options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The typed value of every declared option of ``scorer`` (defaults filled)."""
    options = options or {}
    return {o.name: o.value(scorer, options.get(f"{scorer}.{o.name}")) for o in declared}


__all__ = ["Option", "check_options", "resolve", "split_key"]
