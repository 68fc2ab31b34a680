"""Finding encoder weights without touching the network.

Resolution order (first hit wins): an explicit path given by the user, the
project's weights folder (``FPR_WEIGHTS_DIR``, default ``~/.cache/fpr/weights``),
then the Hugging Face cache. Weights shipped inside the package count as found.
Nothing here downloads; :func:`fetch_weights` is the only function that may, and
it refuses when ``FPR_OFFLINE``/``HF_HUB_OFFLINE`` is set or no network answers.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from fpr.errors import NotFoundError

_CHECKSUMS: dict[tuple[str, int, int], str] = {}


@dataclass(frozen=True)
class WeightsSource:
    """Where an encoder's weights come from.

    ``kind``: ``none`` (no weights: a fixed function), ``package`` (a file shipped
    in fpr), ``hf`` (a Hugging Face repo, files looked up in the local cache),
    ``local`` (a file or folder the user supplies, e.g. a trained checkpoint).
    ``files`` lists the candidate file names in the repo or folder, preferred first.
    """

    kind: str
    repo: str | None = None
    files: tuple[str, ...] = ()
    package_path: str | None = None
    folder_name: str | None = None  # sub-folder of FPR_WEIGHTS_DIR; defaults to the encoder id
    extra_files: tuple[str, ...] = field(default_factory=tuple)  # e.g. configs that must sit beside weights


@dataclass(frozen=True)
class ResolvedWeights:
    path: Path | None
    where: str  # "none" | "package" | "explicit" | "weights-dir" | "hf-cache"
    checksum: str  # "sha256:<hex>" of the weights bytes, or "none"

    @property
    def found(self) -> bool:
        return self.where == "none" or self.path is not None


def weights_dir() -> Path:
    return Path(os.environ.get("FPR_WEIGHTS_DIR", Path.home() / ".cache" / "fpr" / "weights")).expanduser()


def is_offline() -> bool:
    return any(os.environ.get(v, "") not in ("", "0", "false", "False") for v in ("FPR_OFFLINE", "HF_HUB_OFFLINE"))


def file_checksum(path: Path) -> str:
    """SHA-256 of a file, or of a folder's weight files (names and bytes, sorted); memoised by size+mtime."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and p.suffix in (".safetensors", ".bin", ".pt", ".pth", ".ckpt"))
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        memo_key = (str(f.resolve()), st.st_size, st.st_mtime_ns)
        digest = _CHECKSUMS.get(memo_key)
        if digest is None:
            fh = hashlib.sha256()
            with open(f, "rb") as fp:
                for chunk in iter(lambda: fp.read(1 << 20), b""):
                    fh.update(chunk)
            digest = fh.hexdigest()
            _CHECKSUMS[memo_key] = digest
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode())
        h.update(digest.encode())
    return "sha256:" + h.hexdigest()


def _first_existing(folder: Path, names: tuple[str, ...]) -> Path | None:
    if not names:
        return folder if folder.exists() and any(folder.iterdir()) else None
    for name in names:
        if (folder / name).is_file():
            return folder / name
    return None


def _hf_cache_lookup(repo: str, names: tuple[str, ...]) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub ships with timm
        return None
    for name in names:
        hit = try_to_load_from_cache(repo_id=repo, filename=name)
        if isinstance(hit, str) and Path(hit).is_file():
            return Path(hit)
    return None


def candidate_locations(encoder_id: str, source: WeightsSource) -> list[str]:
    """Human-readable list of the places :func:`resolve_weights` looks, for error messages."""
    places = []
    folder = weights_dir() / (source.folder_name or encoder_id)
    if source.files:
        places.append(str(folder / source.files[0]))
    else:
        places.append(str(folder))
    if source.repo:
        places.append(f"Hugging Face cache for {source.repo}")
    return places


def resolve_weights(encoder_id: str, source: WeightsSource, explicit: str | Path | None = None,
                    *, required: bool = True) -> ResolvedWeights:
    """Find the weights for ``encoder_id`` offline; raise NotFoundError (or return not-found) when absent."""
    if source.kind == "none":
        return ResolvedWeights(None, "none", "none")
    if explicit is not None:
        p = Path(explicit).expanduser()
        if p.is_dir():
            hit = _first_existing(p, source.files) if source.files else p
            if hit is None:
                raise NotFoundError(f"no weights file for encoder '{encoder_id}' in folder", where=str(p),
                                    hint=f"expected one of: {', '.join(source.files)}")
            p = hit
        if not p.exists():
            raise NotFoundError(f"weights for encoder '{encoder_id}' not found", where=str(p))
        return ResolvedWeights(p, "explicit", file_checksum(p))
    if source.kind == "package":
        from importlib import resources

        assert source.package_path, "package weights need package_path"
        p = Path(str(resources.files("fpr").joinpath(source.package_path)))
        if p.is_file():
            return ResolvedWeights(p, "package", file_checksum(p))
    folder = weights_dir() / (source.folder_name or encoder_id)
    if folder.exists():
        hit = _first_existing(folder, source.files)
        if hit is not None:
            return ResolvedWeights(hit, "weights-dir", file_checksum(hit))
    if source.repo:
        hit = _hf_cache_lookup(source.repo, source.files)
        if hit is not None:
            return ResolvedWeights(hit, "hf-cache", file_checksum(hit))
    if not required:
        return ResolvedWeights(None, "missing", "missing")
    raise NotFoundError(
        f"weights for encoder '{encoder_id}' are missing",
        where="looked in " + "; ".join(candidate_locations(encoder_id, source)),
        hint=(f"run 'fpr encoders fetch {encoder_id}' on a machine with a network, or "
              f"'fpr encoders import {encoder_id} PATH' with a downloaded copy"),
    )
