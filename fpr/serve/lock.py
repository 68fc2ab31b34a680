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

from fpr.errors import BusyError


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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode("utf-8", "replace")
            os.close(fd)
            raise BusyError(f"this workspace is already served by another 'fpr serve' ({_describe(holder)})",
                            hint="stop that server first, or serve another --workspace") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), **about}).encode())
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
