"""Defaults that several layers share, declared once (the CLI, the Python API and the service read them here).

A default that only one function uses stays in that function's signature.
"""
from __future__ import annotations

EMBED_BATCH_SIZE = 64  # images per embedding batch (decode + forward); CPU embeddings do not depend on it

__all__ = ["EMBED_BATCH_SIZE"]
