"""Third-party scorers and encoders, found through Python entry points.

A package adds a scorer or an encoder by declaring an entry point in the group
``fpr.scorers`` or ``fpr.encoders`` whose value is a module; importing that module
registers its scorers (``fpr.scorers.register_scorer``) or encoders
(``fpr.encoders.registry.register``), exactly as fpr's own modules do:

    [project.entry-points."fpr.scorers"]
    my-scorer = "my_package.fpr_scorer"

A plugin that fails to import is an error naming the plugin and its package, never
silently skipped: a missing scorer would otherwise change what a run measures.
"""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from fpr.errors import FprError


def load_plugins(group: str) -> list[str]:
    """Import every module registered under ``group``; returns the entry point names loaded."""
    loaded = []
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        dist = getattr(ep, "dist", None)
        package = f"{dist.name} {dist.version}" if dist is not None else "an installed package"
        try:
            importlib.import_module(ep.value.split(":")[0])
        except Exception as exc:  # a plugin's own failure, reported with its name
            raise FprError(f"plugin '{ep.name}' ({group}, from {package}) failed to load: "
                           f"{type(exc).__name__}: {exc}",
                           hint=f"fix or uninstall {package.split()[0]}") from exc
        loaded.append(ep.name)
    return loaded


__all__ = ["load_plugins"]
