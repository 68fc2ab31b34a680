"""Third-party scorers and encoders, found through Python entry points.

A package adds a scorer or an encoder by declaring an entry point in the group
``fpr.scorers`` or ``fpr.encoders`` whose value is a module; importing that module
registers its scorers (``fpr.scorers.register_scorer``) or encoders
(``fpr.encoders.registry.register``), exactly as fpr's own modules do:

    [project.entry-points."fpr.scorers"]
    my-scorer = "my_package.fpr_scorer"           # a module that registers its scorers on import
    my-scorer = "my_package.fpr_scorer:SCORER"    # or one object, registered if its module did not

A plugin that fails to import is an error naming the plugin and its package, never
silently skipped: a missing scorer would otherwise change what a run measures.
"""
from __future__ import annotations

from fpr.registry import load_group


def load_plugins(group: str) -> list[str]:
    """Import every module registered under ``group``; returns the entry point names loaded (the registries
    load their plugins themselves: :class:`fpr.registry.Registry`)."""
    return load_group(group)


__all__ = ["load_plugins"]
