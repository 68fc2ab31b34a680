"""The one way fpr writes files and folders: atomically, respecting the umask, failing in one line.

Every file fpr creates is first written to a hidden temporary name in the *same*
folder (so the final ``os.replace`` is a rename on one filesystem) and renamed
over the destination only once complete: a reader sees the old file or the new
one, never half a file, and a crash leaves at most a ``.tmp-*`` file behind.
``tempfile.mkstemp``/``mkdtemp`` create 0600/0700 entries; fpr's outputs are
ordinary user files, so they are given the mode ``open()``/``mkdir()`` would
give them: ``0o666 & ~umask`` for files and ``0o777 & ~umask`` for folders
(0644/0755 under umask 022, 0640/0750 under 027).

API (all take the destination path and return it):

- :func:`atomic_write_path` ``(path, write_fn)``: ``write_fn(tmp_path)`` writes the content
  to ``tmp_path`` (e.g. ``df.to_parquet``); the result replaces ``path``.
- :func:`atomic_write` ``(path, write_fn)``: the same, ``write_fn(fp)`` writing to an
  open binary file (e.g. ``np.save(fp, arr)``).
- :func:`atomic_write_bytes` / :func:`atomic_write_text`: the same for bytes / text.
- :func:`atomic_write_dir` ``(folder, fill_fn)``: ``fill_fn(tmp_dir)`` fills a fresh
  folder which then replaces ``folder`` (the old one is renamed aside and removed
  only after the new one is in place).
- :func:`new_temp_dir` ``(dest)``: a fresh hidden folder beside ``dest`` (umask mode),
  and :func:`swap_in_dir` ``(tmp, dest)``: the rename step, for callers that fill
  the folder themselves.
- :func:`ensure_dir` ``(folder)``: create a folder (and parents) or fail in one line.
- :func:`replace_file` ``(src, dest)``: the rename alone, for entries built elsewhere (caches' links and
  set-asides); ``os.replace`` appears in this module only (``tests/test_ownership.py``).

Any OS failure to create, write or rename (permission denied, read-only
filesystem, a path through a regular file, disk full) becomes an
:class:`~fpr.errors.InputError` naming the folder and what to do; pass ``hint=``
for a better one (e.g. ``"set FPR_CACHE_DIR to a writable folder"``).
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import IO, Callable

from fpr import keys, settings
from fpr.errors import InputError

DEFAULT_HINT = "choose a writable folder (check its permissions and free space)"


def cache_root() -> Path:
    """fpr's cache folder: ``$FPR_CACHE_DIR``, default ``~/.cache/fpr`` (embeddings, worlds, judge replies)."""
    return settings.get("FPR_CACHE_DIR")


def safe_stem(name: str, max_chars: int = 60, *, unique: bool = True) -> str:
    """A file-name stem for any id (``method/identity/k``, spaces, dots, non-ASCII): its letters, digits, ``.``,
    ``_`` and ``-`` (others become ``_``, at most ``max_chars`` of them) plus 12 hex digits of the id's sha256, so
    two ids never share a stem (also on case-insensitive file systems) and none is hidden or a path.

    ``unique=False``: the readable part alone (``_`` when nothing is left), for a folder whose name is read back
    as a label (``fpr gallery import --folder`` reads ``<group>/<identity>/``)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("._")[:max_chars]
    if not unique:
        return readable or "_"
    return f"{readable}-{keys.sha256_hex(str(name))[:12]}" if readable else keys.sha256_hex(str(name))[:12]


def replace_file(src: str | Path, dest: str | Path) -> None:
    """Rename ``src`` over ``dest`` in one step (``os.replace``): the one rename of fpr's writes, for callers
    that build the new entry themselves (a hard link, a set-aside). OS errors propagate as they are: the
    caller decides whether they are a user's error (:func:`write_error`) or a cache's warning."""
    os.replace(src, dest)


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux /proc), else set and restored."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    return 0o777 & ~current_umask()


def write_error(folder: Path, exc: OSError, hint: str | None = None, what: str = "cannot write to folder"
                ) -> InputError:
    reason = exc.strerror or str(exc) or type(exc).__name__
    if isinstance(exc, (NotADirectoryError, FileExistsError)) and _file_on_path(folder):
        reason = "a file is in the way of this folder"
    return InputError(f"{what} ({reason})", where=str(folder), hint=hint or DEFAULT_HINT)


def _file_on_path(folder: Path) -> bool:
    return any(p.exists() and not p.is_dir() for p in (folder, *folder.parents))


def ensure_dir(folder: str | Path, *, hint: str | None = None) -> Path:
    """Create ``folder`` (and parents) if needed; an unusable location is one InputError."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(folder, exc, hint, "cannot create folder") from None
    if not folder.is_dir():
        raise InputError("cannot create folder (a file is in the way)", where=str(folder), hint=hint or DEFAULT_HINT)
    return folder


def atomic_write_path(path: str | Path, write_fn: Callable[[Path], object], *, hint: str | None = None,
                      durable: bool = False) -> Path:
    """Write ``path`` by calling ``write_fn(tmp_path)`` then renaming the temp file over ``path``.

    ``durable``: flush the temp file to disk before the rename, so a power loss cannot leave an
    entry that names an empty file (caches whose entries are expensive to recompute)."""
    path = Path(path)
    folder = ensure_dir(path.parent, hint=hint)
    tmp = None
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=f".tmp-{path.name}.")
        os.close(fd)
        tmp = Path(name)
        write_fn(tmp)
        if durable:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise write_error(folder, exc, hint) from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    return path


def atomic_write(path: str | Path, write_fn: Callable[[IO[bytes]], object], *, hint: str | None = None) -> Path:
    """Write ``path`` through ``write_fn(binary file)``, atomically."""
    def to_path(tmp: Path) -> None:
        with open(tmp, "wb") as fp:
            write_fn(fp)

    return atomic_write_path(path, to_path, hint=hint)


def atomic_write_bytes(path: str | Path, data: bytes, *, hint: str | None = None) -> Path:
    return atomic_write_path(path, lambda tmp: tmp.write_bytes(data), hint=hint)


def atomic_write_text(path: str | Path, text: str, *, hint: str | None = None, durable: bool = False) -> Path:
    return atomic_write_path(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), hint=hint, durable=durable)


def new_temp_dir(dest: str | Path, *, hint: str | None = None) -> Path:
    """A fresh, empty hidden folder beside ``dest`` (same filesystem), with the umask's folder mode."""
    dest = Path(dest)
    folder = ensure_dir(dest.parent, hint=hint)
    try:
        tmp = Path(tempfile.mkdtemp(dir=folder, prefix=f".tmp-{dest.name}-"))
        os.chmod(tmp, dir_mode())
    except OSError as exc:
        raise write_error(folder, exc, hint) from None
    return tmp


def swap_in_dir(tmp: str | Path, dest: str | Path, *, hint: str | None = None) -> Path:
    """Replace ``dest`` by ``tmp`` with renames only: a crash leaves the old or the new folder (old in ``.old-*``)."""
    tmp, dest = Path(tmp), Path(dest)
    old = None
    try:
        if dest.exists():
            old = dest.parent / f".old-{dest.name}-{keys.random_hex(8)}"
            os.replace(dest, old)
        try:
            os.replace(tmp, dest)
        except BaseException:
            if old is not None:
                os.replace(old, dest)
            raise
    except OSError as exc:
        raise write_error(dest.parent, exc, hint) from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return dest


def atomic_write_dir(dest: str | Path, fill_fn: Callable[[Path], object], *, hint: str | None = None) -> Path:
    """Build a folder with ``fill_fn(tmp_dir)`` and swap it in over ``dest``; nothing is left behind on failure."""
    dest = Path(dest)
    tmp = new_temp_dir(dest, hint=hint)
    try:
        try:
            fill_fn(tmp)
            for p in tmp.rglob("*"):  # files written by libraries (faiss, numpy) follow the umask already;
                os.chmod(p, dir_mode() if p.is_dir() else file_mode())  # mkstemp-made ones do not
        except OSError as exc:
            raise write_error(dest.parent, exc, hint) from None
        swap_in_dir(tmp, dest, hint=hint)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def check_plot_path(path: str | Path, option: str = "--plot") -> Path:
    """Check a figure's path before any work: a format matplotlib writes and a folder that exists (or can be
    made) and takes a file. A plot that fails after a long computation would otherwise lose that time."""
    path = Path(path)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise InputError(f"{option} must end in {', '.join(PLOT_SUFFIXES)}, got '{path.name}'",
                         hint=f"e.g. {option} {path.with_suffix('.png').name}")
    hint = f"choose a {option} file in a writable folder"
    folder = ensure_dir(path.parent, hint=hint)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=f".tmp-{path.name}.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise write_error(folder, exc, hint) from None
    if path.is_dir():
        raise InputError(f"{option} names a folder, not a file", where=str(path), hint=hint)
    return path
