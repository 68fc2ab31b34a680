"""Where a world query drifted, in image space: the known answer of ``fpr explain``'s evidence map.

A graded query ``k`` of ``context@drift`` renders :meth:`World.drifted_markings` in its view
(:meth:`World.query_view`). The same view rendered with the identity's own markings differs from it exactly
where the redrawn markings show: :func:`redrawn_pixels` is that set (every pixel whose RGB value differs,
after lighting, noise and blur, which are the same for both renders). Drift 0 and the copy controls redraw
nothing (an empty mask); drift 1 is another individual, so its whole visible animal differs.
:func:`subject_pixels` is the visible animal of the same view (the silhouette baseline a localisation must
beat). Both are pure functions of the world's config and the query, like every image of the world.
"""
from __future__ import annotations

import numpy as np

from fpr.errors import InputError
from fpr.galleries.world import COPY_CONTEXT, World, parse_identity
from fpr.galleries.world.render import animal_layer, render_view, visible_subject

__all__ = ["parse_query_id", "redrawn_pixels", "subject_pixels"]


def parse_query_id(query_id: str) -> tuple[str, str, int, int]:
    """``method/species-0000042/k`` (the ids :meth:`World.write` gives) -> (method, species, identity, k)."""
    parts = str(query_id).split("/")
    if len(parts) != 3 or not parts[2].isdigit():
        raise InputError(f"'{query_id}' is not a world query id", hint="world query ids are method/species-NNNNNNN/k")
    species, ident = parse_identity(parts[1])
    return parts[0], species, ident, int(parts[2])


def redrawn_pixels(world: World, method: str, species: str, ident: int, k: int) -> np.ndarray:
    """(size, size) bool: the pixels of query ``k``'s image that its drift redrew (see the module docstring)."""
    spec = world.query_spec(method, species, ident, k)
    size = world.config.size
    if spec.context == COPY_CONTEXT or spec.drift <= 0:
        return np.zeros((size, size), dtype=bool)
    view = world.query_view(spec, species, ident, k)
    kept = np.asarray(render_view(world.markings(species, ident), view))
    drawn = np.asarray(render_view(world.drifted_markings(species, ident, k, spec.drift), view))
    return (kept != drawn).any(axis=-1)


def subject_pixels(world: World, method: str, species: str, ident: int, k: int) -> np.ndarray:
    """(size, size) bool: the visible animal of graded query ``k``'s view (not under its occluder)."""
    spec = world.query_spec(method, species, ident, k)
    if spec.context == COPY_CONTEXT:
        raise InputError(f"'{method}' is a copy control: its subject is a reference's pasted pixels",
                         hint="subject masks are for graded methods (context@drift)")
    view = world.query_view(spec, species, ident, k)
    return visible_subject(animal_layer(world.drifted_markings(species, ident, k, spec.drift), view), view)
