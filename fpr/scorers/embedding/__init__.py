"""Scorers that are a similarity under a registered encoder: ``clip-t`` (``clip_t``), prompt following as the
cosine of an image's and its prompt's embeddings.
Importing this package imports none of them (finding one scorer imports its module only).
"""
