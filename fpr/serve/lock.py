"""One server per workspace: an OS lock on ``<workspace>/serve/server.lock`` held for the server's lifetime.

A second ``fpr serve`` on the same workspace must not run start-up recovery (it would fail the
live server's running runs, queue its queued runs twice and delete its uploads in flight), so
the lock is taken before anything else is touched and recovery runs only under it. The kernel
releases it when the process dies, so a killed server never blocks the next one.
"""
from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from fpr.errors import BusyError, InputError


@dataclass
class ServerLock:
    path: Path
    fd: int | None = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def acquire(self, **about) -> None:
        """Take the lock without waiting and write ``about`` (pid, host, port) into it; BusyError if held."""
        if self.fd is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # a folder in its place, a read-only workspace, a file where a folder should be
            raise InputError(f"cannot open the server lock: {_why(exc)}", where=str(self.path),
                             hint="remove or fix what is at that path, or serve a --workspace this user can "
                                  "write") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode("utf-8", "replace")
            os.close(fd)
            raise BusyError(f"this workspace is already served by another 'fpr serve' ({_describe(holder)})",
                            hint="stop that server first, or serve another --workspace") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"pid": os.getpid(), **about}).encode())
        except OSError as exc:  # a full disk: the lock would hold no holder to name
            os.close(fd)
            raise InputError(f"cannot write the server lock: {_why(exc)}", where=str(self.path),
                             hint="free space on that disk, or serve another --workspace") from None
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the lock
            self.fd = None


def _describe(holder: str) -> str:
    try:
        info = json.loads(holder)
        return f"pid {info['pid']}, {info.get('host')}:{info.get('port')}"
    except (ValueError, KeyError, TypeError):  # written by a server that was killed mid-write: say so
        return "holder unknown"


def _why(exc: OSError) -> str:
    """An OS error in words, without the path (the message names it once)."""
    if isinstance(exc, IsADirectoryError):
        return "it is a folder"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, (NotADirectoryError, FileExistsError)):
        return "a file stands where a folder of its path should be"
    return exc.strerror or type(exc).__name__
