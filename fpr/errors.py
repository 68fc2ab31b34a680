"""Errors that users can act on.

Every failure that a user can fix is raised as an :class:`FprError`. The CLI prints
it as one line (what went wrong, where, what to do next) and exits non-zero; only
``--debug`` shows a traceback. Anything else reaching the CLI is a bug in fpr.
"""
from __future__ import annotations


class FprError(Exception):
    """A user-facing error: ``what`` happened, ``where`` (a path, a name), ``hint`` to fix it."""

    exit_code = 2

    def __init__(self, what: str, *, where: str | None = None, hint: str | None = None):
        self.what = what
        self.where = where
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [self.what]
        if self.where:
            parts[0] = f"{self.what} ({self.where})"
        if self.hint:
            parts.append(self.hint)
        return "; ".join(parts).replace("\n", " ")


class InputError(FprError):
    """A file, manifest, argument or image that fpr cannot use."""


class NotFoundError(FprError):
    """A named gallery, index, run, encoder or weights file that does not exist."""


class ConflictError(FprError):
    """Something already exists, or does not match what it was built with."""


class BusyError(FprError):
    """The workspace is being written by another process."""

    exit_code = 3


class LimitError(FprError):
    """A limit per caller is reached (the service's daily submissions): try again after the time it names."""


def choices_hint(valid: list[str] | tuple[str, ...], noun: str = "choices", *, given: str | None = None) -> str:
    """``valid <noun>: a, b, c``; with ``given`` (a name that was not found), led by the closest valid one."""
    shown = ", ".join(valid) if valid else "(none)"
    if given is not None:
        import difflib  # only on the way to an error

        close = difflib.get_close_matches(given, list(valid), n=1)
        if close:
            return f"did you mean '{close[0]}'? valid {noun}: {shown}"
    return f"valid {noun}: {shown}"
