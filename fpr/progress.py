"""Progress bars and log lines: always on stderr, never on stdout (stdout is for results)."""
from __future__ import annotations

import os
import sys
from typing import Iterable, TypeVar

T = TypeVar("T")
_enabled = os.environ.get("FPR_QUIET", "") in ("", "0")


def set_enabled(flag: bool) -> None:
    global _enabled
    _enabled = flag


def enabled() -> bool:
    return _enabled


def log(message: str) -> None:
    if _enabled:
        print(f"fpr: {message}", file=sys.stderr, flush=True)


def bar(iterable: Iterable[T] | None = None, *, total: int | None = None, desc: str = "", unit: str = "it"):
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, disable=not _enabled,
                leave=False, dynamic_ncols=True, mininterval=0.5)
