"""Helpers several workflows share, declared here (not imported as another workflow's private names):
the encoder an index was built with, the embedding callable the pipeline is given, the check that a
stored run's index is still the one it was made with."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from fpr.encoders.background import background_of_key, with_background
from fpr.errors import ConflictError
from fpr.eval import relevance
from fpr.store import records as db
from fpr.store.workspace import Workspace

if TYPE_CHECKING:
    from fpr.encoders.embed import EmbedResult
    from fpr.encoders.registry import Encoder


def index_encoder(opened: "relevance.OpenIndex", weights: str | None, device: str, *,
                  hint: str = "pass --weights with the original file, or rebuild the index") -> Encoder:
    """The encoder an index was built with (same weights), with the index's protocol, background step included."""
    from fpr.encoders.registry import load_encoder

    card = opened.index.card
    enc = load_encoder(card.encoder, weights=weights, device=device)
    if enc.weights.checksum != card.weights_checksum:
        raise ConflictError(f"encoder '{enc.id}' weights differ from those index '{opened.row.name}' was built with",
                            hint=hint)
    return with_background(enc, background_of_key(card.preprocessing))


def embedder(enc: Encoder, batch_size: int, workers: int | None, data: Mapping[str, bytes] | None = None):
    """``embed(paths, on_error=, desc=)`` for the pipeline; ``data``: the bytes of images held in memory, by the
    path string that stands for them."""
    from fpr.encoders.embed import embed_paths

    def embed(paths, *, on_error: str = "raise", desc: str = "embedding") -> EmbedResult:

        return embed_paths(enc, paths, batch_size=batch_size, workers=workers, on_error=on_error, desc=desc,
                           data=data)
    return embed


def require_current_index(ws: Workspace, run: db.RunRow) -> db.IndexRow:
    why = relevance.index_change(run, db.find_index(ws, run.index_name))
    if why:
        raise ConflictError(f"run '{run.run_id}' was made with index '{run.index_name}', which {why}",
                            where=str(ws.root),
                            hint="rerun the queries against the current index (fpr query ... --overwrite), or "
                                 "pass --allow-stale to read the stored results as they are")
    return db.get_index(ws, run.index_name)


__all__ = ["embedder", "index_encoder", "require_current_index"]
