"""Reading the cards and manifests fpr is handed: checked at the door, each failure one line.

A card (a JSON object describing a folder: a data set, a model, an index) or a manifest's
columns can be truncated, edited by hand, or written by something else. Nothing read here is
trusted: the JSON must parse to an object, each declared field must be present and of its
type, numbers must be finite and within their range, labels within {0, 1}, and a path a card
or manifest names must stay inside its folder (no ``..`` escape, no absolute path, no symlink
leading out). Every failure is one :class:`~fpr.errors.InputError` naming the file and the
field, so a user knows which file to rebuild or fix; nothing is written before these checks.

Images the files name are read by :mod:`fpr.images` (its decompression-bomb limit), never here.

Names: fpr keeps paths, identities and groups as UTF-8 text (hashed into keys, stored in DuckDB and
Parquet), so a file or folder name holding bytes that are not UTF-8 (``b"\\xff"``, which Python carries
as a lone surrogate) is refused by :func:`utf8_path` in one line showing the bytes, before anything is
stored, rather than failing later inside a hash or the database.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from fpr.errors import InputError

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "an object",
               list: "a list"}


@dataclass(frozen=True)
class Field:
    """One field of a card: its name, the type(s) it may hold, whether it must be there."""

    name: str
    kind: type | tuple[type, ...]
    required: bool = True

    def kinds(self) -> tuple[type, ...]:
        return self.kind if isinstance(self.kind, tuple) else (self.kind,)

    def accepts(self, value: Any) -> bool:
        kinds = self.kinds()
        if isinstance(value, bool):  # JSON true/false is no number, whatever Python's bool says
            return bool in kinds
        if isinstance(value, int) and float in kinds:
            return True
        return isinstance(value, kinds)

    def describe(self) -> str:
        return " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in self.kinds())


def read_card(path: str | Path, *, what: str, fields: Iterable[Field] = (), hint: str | None = None) -> dict:
    """The JSON object at ``path`` with ``fields`` checked; a missing, empty, unparsable, non-object or
    incomplete card is one InputError naming the file (and the field)."""
    p = Path(path)
    hint = hint or f"rebuild the {what}"
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} not found", where=str(p), hint=hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {what} ({type(exc).__name__}: {exc})", where=str(p), hint=hint) from None
    if not text.strip():
        raise InputError(f"{what} is empty", where=str(p), hint=hint)
    try:
        card = json.loads(text)
    except ValueError as exc:
        msg = getattr(exc, "msg", str(exc))
        line = getattr(exc, "lineno", None)
        raise InputError(f"{what} is not valid JSON ({msg}{f', line {line}' if line else ''}; truncated?)",
                         where=str(p), hint=hint) from None
    if not isinstance(card, dict):
        raise InputError(f"{what} must be a JSON object, found {type(card).__name__}", where=str(p), hint=hint)
    check_fields(card, fields, where=str(p), what=what, hint=hint)
    return card


def check_fields(card: dict, fields: Iterable[Field], *, where: str, what: str, hint: str | None = None) -> None:
    """Each field present (if required) and of its declared type; NaN and infinities are refused too."""
    for f in fields:
        if f.name not in card:
            if f.required:
                raise InputError(f"{what} lacks {f.name}", where=where, hint=hint)
            continue
        value = card[f.name]
        if not f.accepts(value):
            raise InputError(f"{what} field '{f.name}' must be {f.describe()}, found {json.dumps(value)[:40]}",
                             where=where, hint=hint)
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{what} field '{f.name}' must be a finite number, found {value}", where=where,
                             hint=hint)


def finite(value: Any, *, name: str, where: str | None = None, low: float | None = None,
           high: float | None = None, low_open: bool = False) -> float:
    """``value`` as a finite float within [low, high] (``(low, high]`` with ``low_open``), or one InputError
    naming the field: NaN passes every ``<``/``>`` comparison unnoticed, so finiteness is checked first."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, got {value!r}", where=where) from None
    if not math.isfinite(x):
        raise InputError(f"{name} must be a finite number, got {x}", where=where)
    below = x <= low if (low is not None and low_open) else (low is not None and x < low)
    if below or (high is not None and x > high):
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        bracket = "(" if low_open else "["
        raise InputError(f"{name} must be within {bracket}{lo}, {hi}], got {x:g}", where=where)
    return x


def binary_labels(values: Iterable[Any], *, name: str, where: str) -> list[int]:
    """Labels as ints, each exactly 0 or 1 (``"1"``, ``1.0`` and ``True`` are 1), else one InputError naming
    the column and the first bad row (a manifest's row numbers: the header is row 1)."""
    out = []
    for i, v in enumerate(values):
        text = str(v).strip().lower()
        label = {"0": 0, "1": 1, "0.0": 0, "1.0": 1, "false": 0, "true": 1}.get(text)
        if label is None:
            raise InputError(f"'{name}' labels must be 0 or 1, found {str(v)[:20]!r} in row {i + 2}", where=where)
        out.append(label)
    return out


def confined(base: str | Path, value: Any, *, name: str, where: str) -> Path:
    """``value`` (a relative path a card or manifest names) resolved inside ``base``: an absolute path, a
    ``..`` that leaves the folder or a symlink whose target lies outside it is one InputError naming it."""
    text = str(value)
    rel = Path(text)
    if not text.strip() or "\x00" in text:
        raise InputError(f"'{name}' is not a path: {text[:40]!r}", where=where)
    if rel.is_absolute() or text.startswith("~"):
        raise InputError(f"'{name}' must be relative to its folder, got {text[:80]!r}", where=where,
                         hint="paths a card or manifest names stay inside its folder")
    root = Path(base).resolve()
    target = (root / rel).resolve()  # follows symlinks, so a link leading out is caught here too
    if target != root and root not in target.parents:
        raise InputError(f"'{name}' leads outside its folder ({text[:80]!r} resolves to {target})", where=where,
                         hint="paths a card or manifest names stay inside its folder; copy the file in instead")
    return target


def shown_path(path: str | Path) -> str:
    """A path as printable text: bytes that are not UTF-8 shown as ``\\xff`` escapes."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


def utf8_path(path: str | Path, *, what: str = "file name", hint: str | None = None) -> str:
    """``path`` as text when its name is UTF-8; else one InputError showing its bytes."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"{what} is not UTF-8 text", where=shown_path(text),
                         hint=hint or "rename it with UTF-8 characters (fpr stores names as UTF-8 text)") from None
    return text


__all__ = ["Field", "binary_labels", "check_fields", "confined", "finite", "read_card", "shown_path", "utf8_path"]
