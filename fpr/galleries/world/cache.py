"""A cache of rendered worlds: a world's files are a pure function of its code and config, render them once.

An entry is ``$FPR_CACHE_DIR/worlds/<key>/`` (default ``~/.cache/fpr/worlds``, beside the embedding
cache), holding the PNGs under ``files/`` with the paths :meth:`World.write` gives them and
``manifest.json`` (every file's size and sha256). The key is the sha256 of :data:`PROTOCOL`, the source
of every module of this package and of :mod:`fpr.keys` (its random streams), the numpy, Pillow and zlib
versions (the pixels' float arithmetic and the PNG encoder) and the whole :class:`WorldConfig`: an edit of
the world's code or another library build is a new key, never a stale hit.

- hit: every file is checked against the manifest (size, then sha256 of its bytes) and hard-linked into
  the world's folder (copied where a link is impossible: another filesystem, a filesystem without links),
  each through a temporary name and a rename, as :func:`_save_png` writes a rendered one;
- miss: the world is rendered as before, then stored: linked (or copied) into a hidden temporary folder
  with its manifest and renamed to its key in one step, so a killed process leaves no half entry (only a
  ``.tmp-*`` folder, removed by a later store once a day old) and two processes storing one key agree
  (the second rename fails, its copy is dropped: the bytes are the same);
- damage (a file missing, of another size or hash, a manifest that does not read, is not an object, lists
  a file as anything but ``[size, sha256]``, or names another key or another source digest than this
  code's): one line on stderr,
  the entry set aside and removed, the world rendered again and stored anew;
- a cache folder that cannot be written: one line on stderr, the world rendered without storing (the
  run's files are right either way; a read-only cache another user filled still serves hits);
- off: ``FPR_WORLD_CACHE=0`` (or ``fpr demo --no-world-cache``).

A hard link shares its bytes with the cache: a world image edited in place (not replaced) changes the
entry, which the next hit's sha256 check reports and renders again.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import PIL

from fpr import keys, progress
from fpr.cache import enabled as cache_enabled, warn_unusable
from fpr.files import cache_root, dir_mode, replace_file, write_error

PROTOCOL = "fpr-world-files/1"  # bump when an entry's layout or what the key covers changes
ENV = "FPR_WORLD_CACHE"
MANIFEST = "manifest.json"
FILES = "files"
STALE_TMP_S = 24 * 3600  # a temporary folder this old is a killed store's, not a running one's
HINT = f"set FPR_CACHE_DIR to a writable folder, or {ENV}=0 to render without the world cache"


def enabled() -> bool:
    """Whether the environment leaves the world cache on (``FPR_WORLD_CACHE`` unset or not 0/off/no/false)."""
    return cache_enabled(ENV)


@lru_cache(maxsize=1)
def source_digest() -> str:
    """sha256 of the world package's modules and :mod:`fpr.keys`, by name and bytes, in name order."""
    package = Path(__file__).resolve().parent
    sources = sorted(package.glob("*.py")) + [package.parents[1] / "keys.py"]
    h = keys.hasher()
    for path in sources:
        h.update(f"{path.relative_to(package.parents[1]).as_posix()}\0{path.stat().st_size}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def key_material(config: dict) -> dict:
    """Everything a world's bytes depend on besides the code: the config and the libraries that turn it into
    PNG bytes."""
    return {"protocol": PROTOCOL, "source": source_digest(), "numpy": np.__version__, "pillow": PIL.__version__,
            "zlib": zlib.ZLIB_RUNTIME_VERSION, "config": config}


def entry_key(config: dict) -> str:
    return keys.json_digest(key_material(config), default=list)


def file_digest(path: Path) -> tuple[int, str]:
    data = path.read_bytes()
    return len(data), keys.sha256_hex(data)


class Damaged(Exception):
    """An entry that does not match its manifest (the reason is the message)."""


@dataclass
class WorldCache:
    """The entries under ``root`` (``$FPR_CACHE_DIR/worlds``)."""

    root: Path

    @classmethod
    def default(cls) -> WorldCache | None:
        """The cache of this environment, or None where ``FPR_WORLD_CACHE`` turns it off."""
        return cls(cache_root() / "worlds") if enabled() else None

    def fetch(self, key: str, files: list[str], dest: Path) -> bool:
        """Put the entry's ``files`` (paths relative to ``dest``) into ``dest``; False on a miss.

        A damaged entry is reported, removed and a miss. Failing to write ``dest`` is the caller's error
        (one line naming the folder), as rendering into it would be."""
        entry = self.root / key
        if not entry.is_dir():
            return False
        try:
            self._verify(entry, files)
        except Damaged as exc:
            self._discard(entry, str(exc))
            return False
        linking = True
        for rel in files:
            try:
                linking = _place(entry / FILES / rel, dest / rel, linking)
            except OSError as exc:
                if not (entry / FILES / rel).exists():
                    return False  # the entry was removed meanwhile (by another process): render them all
                raise write_error((dest / rel).parent, exc) from None
        progress.log(f"world files from the cache ({len(files)} images, {entry})")
        return True

    def _verify(self, entry: Path, files: list[str]) -> None:
        try:
            manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
            listed = manifest["files"]
        except FileNotFoundError:
            raise Damaged("no manifest (an unfinished store)") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise Damaged(f"manifest unreadable: {type(exc).__name__}") from None
        if manifest.get("key") != entry.name or not isinstance(manifest.get("material"), dict) \
                or manifest["material"].get("source") != source_digest():
            raise Damaged("manifest made by other code or for another key")
        if not isinstance(listed, dict) or sorted(listed) != sorted(files):
            raise Damaged("manifest lists other files than this world has")
        for rel in files:
            path = entry / FILES / rel
            if not (isinstance(listed[rel], list) and len(listed[rel]) == 2 and type(listed[rel][0]) is int
                    and isinstance(listed[rel][1], str)):
                raise Damaged(f"manifest entry of {rel} is not [size, sha256]")
            try:
                if path.stat().st_size != listed[rel][0]:
                    raise Damaged(f"{rel}: {path.stat().st_size} bytes, manifest says {listed[rel][0]}")
                if file_digest(path)[1] != listed[rel][1]:
                    raise Damaged(f"{rel}: sha256 differs from the manifest")
            except OSError as exc:
                raise Damaged(f"{rel}: {exc.strerror or type(exc).__name__}") from None

    def _discard(self, entry: Path, reason: str) -> None:
        """Report a damaged entry in one line, rename it aside (no reader finds it again) and remove it."""
        aside = self.root / f".damaged-{entry.name[:16]}-{keys.random_hex(8)}"
        try:
            replace_file(entry, aside)
        except FileNotFoundError:  # another process set it aside first (and reported it)
            return
        except OSError as exc:
            progress.warn(f"damaged world-cache entry {entry} ({reason}) cannot be moved aside "
                          f"({exc.strerror}); rendering the world without the cache")
            return
        progress.warn(f"damaged world-cache entry {entry} ({reason}); removed, rendering the world again")
        shutil.rmtree(aside, ignore_errors=True)  # best effort: a leftover aside folder is never read

    def store(self, key: str, files: list[str], src: Path, config: dict) -> None:
        """Store the rendered ``files`` of ``src`` under ``key``: whole or not at all. A cache folder that
        cannot be written is one line on stderr; the run goes on with its rendered files."""
        entry = self.root / key
        if entry.exists():
            return
        tmp = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._remove_stale()
            tmp = Path(tempfile.mkdtemp(dir=self.root, prefix=f".tmp-{key[:16]}-"))
            os.chmod(tmp, dir_mode())
            listed = {}
            linking = True
            for rel in files:
                linking = _place(src / rel, tmp / FILES / rel, linking)
                listed[rel] = list(file_digest(tmp / FILES / rel))
            manifest = {"key": key, "material": key_material(config), "files": listed}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
            try:
                replace_file(tmp, entry)  # atomic; fails when another process stored the key first (a non-empty folder)
                tmp = None
            except OSError:
                if not (entry / MANIFEST).is_file():
                    raise
        except OSError as exc:
            warn_unusable("world cache", self.root, write_error(self.root, exc, HINT).what, HINT,
                          "the world was rendered and is complete without it")
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)  # best effort: a leftover .tmp-* is removed a day later

    def _remove_stale(self) -> None:
        now = time.time()
        for tmp in self.root.glob(".tmp-*"):
            try:
                old = now - tmp.stat().st_mtime > STALE_TMP_S
            except FileNotFoundError:  # its store just finished or was cleaned by another process
                continue
            if old:
                shutil.rmtree(tmp, ignore_errors=True)


def _place(src: Path, dest: Path, linking: bool) -> bool:
    """Hard-link ``src`` at ``dest`` (through a temporary name and a rename), or copy it where linking is
    impossible; returns whether to try linking the next file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if linking and _same_file(src, dest):  # a rerun into the same folder: already this file's link
        return linking
    tmp = dest.with_name(f".{dest.name}.{keys.random_hex(8)}.tmp")
    if linking:
        try:
            os.link(src, tmp)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            linking = False  # another filesystem, or one without hard links: copy from here on
    if not linking:
        shutil.copyfile(src, tmp)
    replace_file(tmp, dest)
    # POSIX rename of a link onto another link of the same file does nothing and leaves the source: a
    # concurrent writer can make dest that link between the check above and here
    tmp.unlink(missing_ok=True)
    return linking


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except FileNotFoundError:
        return False
