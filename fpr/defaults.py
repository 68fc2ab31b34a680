"""Defaults that several layers share, declared once (the CLI, the Python API and the service read them here).

A default that only one function uses stays in that function's signature.
"""
from __future__ import annotations

EMBED_BATCH_SIZE = 64  # images per embedding batch (decode + forward); CPU embeddings do not depend on it
DEVICE = "auto"  # cuda when torch sees a GPU, else mps, else cpu
TOP_K_STORE = 10  # gallery items stored per query in `rankings`
SCOPE = "group"  # rank a query against its own group's gallery images

__all__ = ["DEVICE", "EMBED_BATCH_SIZE", "SCOPE", "TOP_K_STORE"]
