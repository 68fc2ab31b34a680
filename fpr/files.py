"""Writing files atomically: a reader sees the old file or the new one, never half of one.

Results respect the umask (``tempfile`` creates files 0600 and folders 0700).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Callable

from fpr.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_path(path: str | Path, write: Callable[[str], None]) -> Path:
    """Call ``write(temp path)`` for a temp file in ``path``'s folder, then rename it over ``path``."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise InputError(f"cannot write to this folder: {exc.strerror or exc}", where=str(p.parent),
                         hint="choose a folder you can write") from None
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Write ``path`` through ``write(binary file)``, atomically."""
    def to_path(tmp: str) -> None:
        with open(tmp, "wb") as fp:
            write(fp)
    return atomic_write_path(path, to_path)
