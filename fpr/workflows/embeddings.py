"""``fpr embed``: embed images in row order, locally or on Ray, to a ``.npy`` file."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from fpr.defaults import EMBED_BATCH_SIZE
from fpr.engines import ray as ray_engine
from fpr.engines import ray_runtime
from fpr.engines.parts import discard_parts
from fpr.errors import InputError
from fpr.files import atomic_write
from fpr.tables import read_table, resolve_path

if TYPE_CHECKING:
    from fpr.encoders.embed import EmbedResult


def embed(encoder: str, images: str | Path | Sequence[str], *, out: str | Path | None = None,
          weights: str | None = None, device: str = "auto", batch_size: int = EMBED_BATCH_SIZE,
          workers: int | None = None, engine: str = "local",
          ray: "ray_runtime.RayOptions | dict | None" = None) -> EmbedResult:
    """Embed images (a CSV/Parquet with a ``path`` column, or a list of paths) in row order.

    ``engine="ray"``: on Ray (:mod:`fpr.engines.ray`); shards are kept beside ``out``
    (``.<out name>.fpr-embed/``) until the output is written, so a killed run resumes."""
    from fpr.encoders.embed import embed_paths
    from fpr.encoders.registry import load_encoder

    ray_opts = ray_runtime.ray_options(engine, ray)
    if out is not None and Path(out).suffix != ".npy":
        raise InputError("embeddings output must end in .npy", where=str(out))
    if isinstance(images, (str, Path)):
        p = Path(images)
        df = read_table(p, required=("path",), what="images file")
        paths = [resolve_path(v, p.resolve().parent) for v in df["path"]]
    else:
        paths = [str(x) for x in images]
    if ray_opts is None:
        enc = load_encoder(encoder, weights=weights, device=device)
        res = embed_paths(enc, paths, batch_size=batch_size, workers=workers)
    else:
        import tempfile

        enc = load_encoder(encoder, weights=weights, device="cpu")  # the actors place it on their device
        tmp = None if out is not None else tempfile.TemporaryDirectory(prefix="fpr-embed-")
        shard_dir = Path(tmp.name) if tmp else Path(out).parent / f".{Path(out).name}.fpr-embed"
        res = ray_engine.embed_paths_ray(enc, paths, options=ray_opts, shard_dir=shard_dir, batch_size=batch_size,
                                         device=device)
    if out is not None:
        atomic_write(Path(out), lambda fp: np.save(fp, res.vectors))
    if ray_opts is not None:
        discard_parts(shard_dir)
    return res

