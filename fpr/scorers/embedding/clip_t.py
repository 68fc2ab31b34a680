"""``clip-t``: prompt following, the cosine between the CLIP embeddings of a generated image and its prompt.

The paper's prompt-following metric (App. E; DreamBooth's CLIP-T): both embeddings
are L2-normalised and the value is their dot product, in [-1, 1] (not scaled by
100). Queries without a prompt get no value. The encoder defaults to
``clip-vit-b-32`` and is set with the scorer option ``clip-t.encoder`` (any
registered encoder whose spec has a text tower). Image embeddings go through the
one embedding path, so they are cached like every other embedding.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from fpr.encoders.embed import embed_paths
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.encoding import cached_encoder
from fpr.scorers.options import Option

DEFAULT_ENCODER = "clip-vit-b-32"


class ClipT(Scorer):
    name = "clip-t"
    description = "cosine between the CLIP image embedding of the query and the text embedding of its prompt"
    needs = frozenset({"image", "prompt"})
    metrics = ("score",)
    primary_metric = "score"
    options = (Option("encoder", str, DEFAULT_ENCODER, "encoder with a text tower"),
               Option("batch_size", int, 32, "images and prompts per batch", minimum=1))

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        rows = [i for i, p in enumerate(batch.prompts) if p]
        if not rows:
            return pd.DataFrame(columns=["query_id", "metric", "value"])
        opts = self.option_values(batch.options)
        enc = cached_encoder(opts["encoder"], batch.device)
        bs = opts["batch_size"]
        img = embed_paths(enc, [batch.paths[i] for i in rows], batch_size=bs, desc="clip-t: embedding images").vectors
        prompts = [str(batch.prompts[i]) for i in rows]
        txt = np.concatenate([enc.embed_text(prompts[s:s + bs]) for s in range(0, len(prompts), bs)])
        values = (img.astype(np.float64) * txt.astype(np.float64)).sum(axis=1)
        return pd.DataFrame({"query_id": [batch.query_ids[i] for i in rows], "metric": "score", "value": values})


register_scorer(ClipT())
