"""The oracle row (paper, Table 1): real held-out images of each identity as queries.

The gallery's *reference* images are never in the searchable gallery, so using
them as queries measures what a perfect generator -- one that produces new real
photographs of the subject -- would score: the ceiling of every method, and a
check that the encoder itself can tell the identities apart.

Sim for an oracle query is the mean cosine between the reference image and the
identity's *other* references (a real image against real images). An identity
with a single reference has no other image to compare with: its oracle query
gets an empty reference list, so Sim falls back to the identity's reference set,
i.e. the image with itself (1.0); give identities at least 2 references.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from fpr.errors import InputError
from fpr.galleries.records import GalleryItem

ORACLE_METHOD = "oracle"


def oracle_queries(items: Iterable[GalleryItem]) -> pd.DataFrame:
    """One query per reference item: method ``oracle``, its identity/group, reference_paths = the other references.

    Columns: query_id (``oracle/<group>/<identity>/<k>``), path, identity, group, method, prompt (empty),
    reference_paths (';'-joined) and reference_list (list), in the items' order.
    """
    refs = [it for it in items if it.role == "reference"]
    by_key: dict[tuple[str, str], list[GalleryItem]] = {}
    for it in refs:
        by_key.setdefault((it.group, it.identity), []).append(it)
    rows = []
    for (group, identity), its in by_key.items():
        for k, it in enumerate(its):
            others = [o.path for o in its if o is not it]
            rows.append({"query_id": f"{ORACLE_METHOD}/{group}/{identity}/{k}", "path": it.path,
                         "identity": identity, "group": group, "method": ORACLE_METHOD, "prompt": "",
                         "reference_paths": ";".join(others), "reference_list": others})
    return pd.DataFrame(rows, columns=["query_id", "path", "identity", "group", "method", "prompt",
                                       "reference_paths", "reference_list"])


def append_oracle(queries: pd.DataFrame, items: Iterable[GalleryItem]) -> pd.DataFrame:
    """``queries`` (a read queries frame) followed by the oracle rows; ``row_number`` renumbered."""
    extra = oracle_queries(items)
    if extra.empty:
        raise InputError("the oracle needs reference images, and this gallery has none",
                         hint="import the gallery with reference images (role 'reference')")
    clash = set(extra["query_id"]) & set(queries["query_id"])
    if clash:
        raise InputError(f"query_id '{sorted(clash)[0]}' is reserved for the oracle rows",
                         hint="rename that query or drop --oracle")
    out = pd.concat([queries, extra], ignore_index=True)
    for col in ("method", "prompt", "sim_reference"):  # text columns of the normalised frame
        if col in queries.columns:
            out[col] = out[col].fillna("")
    out["row_number"] = np.arange(len(out))
    return out
