"""Finding, fetching and importing encoder weights without surprises.

Resolution order (first hit wins): an explicit path given by the user (a file, a
folder, a Hugging Face snapshot folder or a ``models--org--name`` cache folder),
the project's weights folder (``FPR_WEIGHTS_DIR``, default ``~/.cache/fpr/weights``,
one sub-folder per encoder id), then the Hugging Face cache (``HF_HUB_CACHE`` /
``HF_HOME``). Weights shipped inside the package count as found.

Nothing here downloads except :func:`fetch_weights`, which refuses with one line
when ``FPR_OFFLINE``/``HF_HUB_OFFLINE`` is set or no network answers.
:func:`import_files` copies a downloaded file or snapshot into the weights
folder atomically (temp folder + rename), converting pickled checkpoints to
safetensors, after proving that the staged copy loads.

A weights *checksum* is the SHA-256 of the weights file; when a source declares
config files that shape the network (``extra_files``/``optional_files``, e.g. an
``open_clip_config.json``), the ones present beside the weights are hashed in
too, because they change the embeddings as much as the tensors do.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fpr import keys, settings
from fpr.errors import ConflictError, FprError, InputError, NotFoundError
from fpr.files import new_temp_dir, swap_in_dir, write_error
from fpr.encoders.checkpoints import convert_to_safetensors

_CHECKSUMS: dict[tuple[str, int, int], str] = {}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
WEIGHTS_HINT = "set FPR_WEIGHTS_DIR to a writable folder"


@dataclass(frozen=True)
class WeightsSource:
    """Where an encoder's weights come from.

    ``kind``: ``none`` (no weights: a fixed function), ``package`` (a file shipped
    in fpr), ``hf`` (a Hugging Face repo, files looked up in the local cache),
    ``local`` (a file or folder the user supplies, e.g. a trained checkpoint).
    ``files`` lists the candidate weights file names in the repo or folder, preferred first.
    ``extra_files`` must sit beside the weights (a location without them does not count);
    ``optional_files`` are used when present (and fetched/imported along).
    """

    kind: str
    repo: str | None = None
    files: tuple[str, ...] = ()
    package_path: str | None = None
    folder_name: str | None = None  # sub-folder of FPR_WEIGHTS_DIR; defaults to the encoder id
    extra_files: tuple[str, ...] = field(default_factory=tuple)  # e.g. configs that must sit beside weights
    optional_files: tuple[str, ...] = field(default_factory=tuple)  # configs used when present
    # the real weights: (file name, SHA-256 hex of that file's bytes) as published, and where that value is
    # published; empty where no citable value exists (the status is then 'unverified', never guessed)
    published_sha256: tuple[tuple[str, str], ...] = ()
    published_from: str = ""
    # the Hub commit ``fpr encoders fetch`` downloads (``kind="hf"``): a snapshot hash cited where it is
    # registered; None where no citable one exists (the repo's current main branch is fetched then)
    revision: str | None = None


VERIFIED, UNVERIFIED, MISMATCH, NO_WEIGHTS = "verified", "unverified", "mismatch", "-"


@dataclass(frozen=True)
class Verification:
    """Whether resolved weights are the published ones: ``status`` and, unless verified, what to do."""

    status: str  # verified | unverified | mismatch | - (no weights, or none found)
    detail: str = ""

    def provenance(self) -> dict:
        return {"status": self.status, "detail": self.detail}


def verify_weights(encoder_id: str, source: WeightsSource, resolved: "ResolvedWeights") -> Verification:
    """Compare the weights file's SHA-256 (its bytes only, no configs) with the published value.

    A mismatching file stays usable (fine-tuned weights are legitimate) but is reported as such.
    """
    if source.kind in ("none", "local") or resolved.path is None:
        # "local": the user's own trained encoder; nothing is published to compare it with
        return Verification(NO_WEIGHTS)
    # a value is published for one file name (open_clip_model.safetensors, not the .bin beside it): another
    # file of the same repo is unverified, not a mismatch
    published = [(n, h) for n, h in source.published_sha256 if n == resolved.path.name]
    if not published:
        what = f"'{encoder_id}'" if not source.published_sha256 else f"{resolved.path.name} of '{encoder_id}'"
        return Verification(UNVERIFIED, f"no published checksum is registered for encoder {what}; "
                                        f"{_verify_hint(encoder_id, source)}")
    digest = _file_digest(resolved.path) if resolved.path.is_file() else None
    if digest is not None and digest in {h for _, h in published}:
        return Verification(VERIFIED)
    expected = ", ".join(f"{n} sha256 {h[:12]}..." for n, h in published)
    return Verification(MISMATCH, f"{resolved.path} is not the published file ({expected}"
                                  f"{'; from ' + source.published_from if source.published_from else ''}); "
                                  f"{_verify_hint(encoder_id, source)}")


def _verify_hint(encoder_id: str, source: WeightsSource) -> str:
    if source.kind == "package":
        return "reinstall fpr to restore the shipped file"
    if source.repo:
        return (f"if these are not deliberately fine-tuned weights, run 'fpr encoders fetch {encoder_id} --overwrite' "
                f"or import the published files of {source.repo}")
    return f"check that the file is the one intended for '{encoder_id}'"


@dataclass(frozen=True)
class ResolvedWeights:
    path: Path | None
    where: str  # "none" | "package" | "explicit" | "weights-dir" | "hf-cache" | "missing" | "incomplete"
    checksum: str  # "sha256:<hex>" of the weights bytes (+ configs beside them), or "none"

    @property
    def found(self) -> bool:
        return self.where == "none" or self.path is not None

    @property
    def folder(self) -> Path | None:
        """The folder holding the weights (and their configs)."""
        if self.path is None:
            return None
        return self.path if self.path.is_dir() else self.path.parent

    def sibling(self, name: str) -> Path | None:
        """A file beside the weights (e.g. ``config.json``), or None."""
        folder = self.folder
        if folder is None:
            return None
        p = folder / name
        return p if p.is_file() else None


def weights_dir() -> Path:
    return settings.get("FPR_WEIGHTS_DIR")


def is_offline() -> bool:
    return settings.flag("FPR_OFFLINE") or settings.flag("HF_HUB_OFFLINE")


def _file_digest(f: Path) -> str:
    st = f.stat()
    memo_key = (str(f.resolve()), st.st_size, st.st_mtime_ns)
    digest = _CHECKSUMS.get(memo_key)
    if digest is None:
        digest = keys.file_sha256(f)
        _CHECKSUMS[memo_key] = digest
    return digest


def file_checksum(path: Path, extras: list[Path] | tuple[Path, ...] = ()) -> str:
    """SHA-256 of a file, or of a folder's weight files (names and bytes, sorted); memoised by size+mtime.

    ``extras`` (config files beside the weights) are hashed in by name and content;
    without extras the value is exactly the file's (or folder's) historical checksum.
    """
    path = Path(path)
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    h = keys.hasher()
    for f in files:
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode())
        h.update(_file_digest(f).encode())
    for extra in sorted(extras, key=lambda p: p.name):
        h.update(f"|{extra.name}|".encode())
        h.update(_file_digest(extra).encode())
    return "sha256:" + h.hexdigest()


def _extras_beside(weights: Path, source: WeightsSource) -> list[Path]:
    folder = weights if weights.is_dir() else weights.parent
    return [folder / n for n in (*source.extra_files, *source.optional_files) if (folder / n).is_file()]


def _missing_required(folder: Path, source: WeightsSource) -> list[str]:
    return [n for n in source.extra_files if not (folder / n).is_file()]


def _checksum(weights: Path, source: WeightsSource) -> str:
    return file_checksum(weights, _extras_beside(weights, source))


def _first_existing(folder: Path, names: tuple[str, ...]) -> Path | None:
    if not names:
        return folder if folder.exists() and any(folder.iterdir()) else None
    for name in names:
        if (folder / name).is_file():
            return folder / name
    return None


def snapshot_folder(p: Path) -> Path:
    """A Hugging Face repo cache folder (``models--org--name``) -> its current snapshot; else ``p``."""
    snaps = p / "snapshots"
    if snaps.is_dir() and (p / "refs").is_dir():
        ref = p / "refs" / "main"
        if ref.is_file():
            rev = ref.read_text().strip()
            if (snaps / rev).is_dir():
                return snaps / rev
        candidates = sorted((d for d in snaps.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
        if candidates:
            return candidates[-1]
    return p


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment now (huggingface_hub reads it once at import)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if settings.raw(var):
            return Path(settings.raw(var)).expanduser()
    if settings.raw("HF_HOME"):
        return Path(settings.raw("HF_HOME")).expanduser() / "hub"
    xdg = settings.raw("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def _hf_cache_lookup(repo: str, names: tuple[str, ...], source: WeightsSource) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub ships with timm
        return None
    for name in names:
        try:
            hit = try_to_load_from_cache(repo_id=repo, filename=name, cache_dir=str(hf_cache_dir()))
        except (OSError, ValueError) as exc:  # a malformed cache must not break 'encoders list': say so
            from fpr import progress

            progress.log(f"ignoring the Hugging Face cache entry for {repo}/{name}: {exc}")
            hit = None
        if isinstance(hit, str) and Path(hit).is_file():
            hit_path = Path(hit)
            if not _missing_required(hit_path.parent, source):
                return hit_path
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
        places.append(f"Hugging Face cache for {source.repo} ({hf_cache_dir()})")
    return places


def _missing_hint(encoder_id: str, source: WeightsSource) -> str:
    if source.repo:
        return (f"run 'fpr encoders fetch {encoder_id}' on a machine with a network, or "
                f"'fpr encoders import {encoder_id} PATH' with a downloaded copy")
    return f"'fpr encoders import {encoder_id} PATH' with a copy of the weights, or pass --weights PATH"


def resolve_weights(encoder_id: str, source: WeightsSource, explicit: str | Path | None = None,
                    *, required: bool = True) -> ResolvedWeights:
    """Find the weights for ``encoder_id`` offline; raise NotFoundError (or return not-found) when absent."""
    if source.kind == "none":
        return ResolvedWeights(None, "none", "none")
    if explicit is not None:
        return _resolve_explicit(encoder_id, source, Path(explicit).expanduser())
    if source.kind == "package":
        from importlib import resources

        assert source.package_path, "package weights need package_path"
        p = Path(str(resources.files("fpr").joinpath(source.package_path)))
        if p.is_file():
            return ResolvedWeights(p, "package", file_checksum(p))
    folder = weights_dir() / (source.folder_name or encoder_id)
    incomplete: list[str] = []
    if folder.exists():
        hit = _first_existing(folder, source.files)
        if hit is not None:
            missing = _missing_required(folder, source)
            if not missing:
                return ResolvedWeights(hit, "weights-dir", _checksum(hit, source))
            incomplete = [str(folder / m) for m in missing]
    if source.repo:
        hit = _hf_cache_lookup(source.repo, source.files, source)
        if hit is not None:
            return ResolvedWeights(hit, "hf-cache", _checksum(hit, source))
    if not required:
        return ResolvedWeights(None, "incomplete" if incomplete else "missing", "missing")
    if incomplete:
        raise NotFoundError(f"weights for encoder '{encoder_id}' are incomplete: missing {', '.join(incomplete)}",
                            hint=_missing_hint(encoder_id, source))
    raise NotFoundError(
        f"weights for encoder '{encoder_id}' are missing",
        where="looked in " + "; ".join(candidate_locations(encoder_id, source)),
        hint=_missing_hint(encoder_id, source),
    )


def _resolve_explicit(encoder_id: str, source: WeightsSource, p: Path) -> ResolvedWeights:
    if not p.exists():
        raise NotFoundError(f"weights for encoder '{encoder_id}' not found", where=str(p))
    if p.is_dir():
        p = snapshot_folder(p)
        if source.files:
            hit = _first_existing(p, source.files)
            if hit is None:
                # a folder with exactly one weights file of another name is still unambiguous
                others = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in WEIGHT_SUFFIXES)
                if len(others) != 1:
                    raise NotFoundError(f"no weights file for encoder '{encoder_id}' in folder", where=str(p),
                                        hint=f"expected one of: {', '.join(source.files)}")
                hit = others[0]
            p = hit
    missing = _missing_required(p if p.is_dir() else p.parent, source)
    if missing:
        raise NotFoundError(f"encoder '{encoder_id}' needs {', '.join(missing)} beside its weights",
                            where=str(p if p.is_dir() else p.parent),
                            hint="give the whole downloaded folder (weights and config), not just the weights file")
    return ResolvedWeights(p, "explicit", _checksum(p, source))


# --------------------------------------------------------------------------- fetch / import

def fetch_weights(encoder_id: str, source: WeightsSource, *, overwrite: bool = False) -> Path:
    """Download the needed files of ``source.repo`` into ``FPR_WEIGHTS_DIR/<id>/`` (atomic). Needs a network."""
    alt = (f"on a machine with a network run 'fpr encoders fetch {encoder_id}' and copy "
           f"{weights_dir() / (source.folder_name or encoder_id)} here, or 'fpr encoders import {encoder_id} PATH'")
    if not source.repo:
        raise InputError(f"encoder '{encoder_id}' has no download source",
                         hint=f"'fpr encoders import {encoder_id} PATH' with a copy of its weights")
    if is_offline():
        raise FprError(f"cannot fetch weights for encoder '{encoder_id}' from {source.repo}: network use is disabled "
                       "(FPR_OFFLINE or HF_HUB_OFFLINE is set)", hint=alt)
    dest = weights_dir() / (source.folder_name or encoder_id)
    if dest.exists() and not overwrite and _first_existing(dest, source.files):
        raise ConflictError(f"weights for encoder '{encoder_id}' are already in the weights folder", where=str(dest),
                            hint="pass --overwrite to download them again")
    try:
        _probe_hub()
        from huggingface_hub import HfApi, snapshot_download

        present = set(HfApi().list_repo_files(source.repo, revision=source.revision))
        chosen = next((f for f in source.files if f in present), None)
        if chosen is None:
            raise FprError(f"repository {source.repo} has none of the expected files {', '.join(source.files)}")
        missing = [f for f in source.extra_files if f not in present]
        if missing:
            raise FprError(f"repository {source.repo} lacks {', '.join(missing)}")
        patterns = [chosen, *source.extra_files, *(f for f in source.optional_files if f in present)]
        tmp = new_temp_dir(dest, hint=WEIGHTS_HINT)
        try:
            snapshot_download(source.repo, revision=source.revision, allow_patterns=patterns, local_dir=str(tmp))
            shutil.rmtree(tmp / ".cache", ignore_errors=True)  # huggingface_hub's local-dir metadata
            swap_in_dir(tmp, dest, hint=WEIGHTS_HINT)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except FprError as exc:
        raise FprError(f"cannot fetch weights for encoder '{encoder_id}': {exc.what}", hint=alt) from None
    except Exception as exc:  # connection refused, DNS, proxy, HTTP errors: one line, not a traceback
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise FprError(f"cannot fetch weights for encoder '{encoder_id}' from {source.repo} "
                       f"({type(exc).__name__}: {first})", hint=alt) from None
    return dest


def _probe_hub(timeout: float = 5.0) -> None:
    """Fail fast (one connection attempt) when the Hub's host is unreachable, instead of minutes of retries.

    Skipped behind a proxy, where only the proxy knows whether the Hub is reachable.
    """
    import socket
    from urllib.parse import urlparse

    if any(settings.raw(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return
    url = urlparse(settings.raw("HF_ENDPOINT") or "https://huggingface.co")
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme != "http" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise ConnectionError(f"cannot reach {host}:{port}: {exc}") from None


def import_files(encoder_id: str, source: WeightsSource, resolved: ResolvedWeights, *,
                 overwrite: bool = False, verify: Callable[[ResolvedWeights], object] | None = None) -> Path:
    """Copy resolved weights (+ configs beside them) into ``FPR_WEIGHTS_DIR/<id>/`` atomically.

    A pickled checkpoint (``.pth``/``.bin``/``.pt``/``.ckpt``, loaded with ``weights_only=True``;
    a bare state dict or one wrapped in ``state_dict``/``model``/``module``) is converted to
    safetensors under the source's safetensors name. The weights file is stored under the
    source's preferred name for its format, so the weights folder resolves it the next time.
    ``verify`` (e.g. the encoder's build function, with its strict key check) is called on
    the staged copy -- the exact files that will be stored -- before anything replaces the
    weights folder: a file that does not load stores nothing.
    """
    assert resolved.path is not None
    dest = weights_dir() / (source.folder_name or encoder_id)
    if dest.exists() and any(dest.iterdir()) and not overwrite:
        raise ConflictError(f"weights for encoder '{encoder_id}' are already in the weights folder", where=str(dest),
                            hint="pass --overwrite to replace them")
    src = resolved.path
    tmp = new_temp_dir(dest, hint=WEIGHTS_HINT)
    try:
        if src.is_dir():  # a source without file names (a whole folder is the weights)
            shutil.copytree(src, tmp / "x", symlinks=False)
            for child in (tmp / "x").iterdir():
                child.rename(tmp / child.name)
            (tmp / "x").rmdir()
            staged = tmp
        elif src.suffix in PICKLE_SUFFIXES and _safetensors_name(source):
            staged = tmp / _safetensors_name(source)
            convert_to_safetensors(src, staged, encoder_id=encoder_id)
        else:
            staged = tmp / _stored_name(src, source)
            shutil.copy2(src, staged)  # follows HF-cache symlinks
        if not src.is_dir():
            for extra in _extras_beside(src, source):
                shutil.copy2(extra, tmp / extra.name)
        if verify is not None:
            verify(ResolvedWeights(staged, "explicit", _checksum(staged, source)))
        swap_in_dir(tmp, dest, hint=WEIGHTS_HINT)
    except OSError as exc:
        raise write_error(dest.parent, exc, WEIGHTS_HINT) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _safetensors_name(source: WeightsSource) -> str | None:
    return next((f for f in source.files if f.endswith(".safetensors")), None)


def _stored_name(src: Path, source: WeightsSource) -> str:
    if src.name in source.files or not source.files:
        return src.name
    same_format = [f for f in source.files if Path(f).suffix == src.suffix]
    return same_format[0] if same_format else source.files[0]


# --------------------------------------------------------------------------- state dicts


