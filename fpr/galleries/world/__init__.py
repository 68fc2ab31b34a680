"""The built-in identity world: synthetic animals whose identity is their markings.

Three species (groups), one per kind of marking: ``zebra`` (stripes), ``leopard``
(spots/rosettes), ``giraffe`` (patches). An identity is an integer; its markings
are a pure function of it. An image renders the markings on the species'
silhouette with a random pose (rotation, scale, perspective, elastic warp),
background, lighting, blur, noise and partial occlusion.

Identities are split by integer range, so training never sees an evaluation
identity (:func:`check_disjoint` enforces it):

- evaluation identities: ``EVAL_RANGE`` (gallery identities in ``[0, 50000)``,
  "generic" identities, never in a gallery, in ``[50000, 100000)``);
- validation identities of the trainer (held out from training *and* from
  evaluation worlds): ``VAL_RANGE``;
- training identities: ``TRAIN_RANGE``.

Simulated personalization methods (queries for a reference identity, each with a
ground-truth ``drift`` and a ``context``; :data:`METHODS`):

- graded methods ``<context>@<drift>`` (:data:`GRADED_METHODS`) cross a context
  (:data:`CONTEXTS`) with a drift level (:data:`DRIFT_LEVELS`):

  - ``new-scene``: a *novel view* (a new pose and viewpoint, size, position, possibly
    mirrored, new lighting; ``render.POSES``) on a background family that no real
    image has (:data:`NOVEL_FAMILIES`);
  - ``ref-pose``: the reference image's pose and framing on a novel background;
  - ``ref-scene``: the reference image's whole scene (the IP-Adapter-Plus behaviour of
    the paper's appendix C);

  drift ``d`` in (0, 1) redraws that share of the markings, calibrated per species by
  changed pixels (:func:`fpr.galleries.world.patterns.calibrated_region`); drift 1 is
  another individual of the species that is *not* in the gallery (what a generator
  that ignores the subject produces); its mAP is the chance level of the group.
  Query ``k`` of an identity has the same markings at a drift level whatever the
  context, and the drift levels redraw nested regions with one new pattern. Views
  differ per method unless ``WorldConfig(shared_view=True)``;
- copy controls (:data:`COPY_METHODS`, context ``copy``), made from one reference
  image: ``paste`` (its animal cut out and pasted on a new background with a small
  shift/scale), ``paste-mirror`` (flipped), ``paste-rescale`` (rescaled by 0.7-0.85
  or 1.15-1.35 and moved) and ``edit`` (in place, background replaced, mild colour
  changes) -- the failures that retrieval rewards and the copy-paste scorer must flag;
- profiles (:data:`PROFILES`): named mixtures of graded methods that behave like the
  real methods the paper evaluates (``dreambooth-like``, ``ip-adapter-plus-like``, ...).

The names of world version 2 stay valid (:data:`METHOD_ALIASES`): ``faithful`` is
``new-scene@0``, ``drift-0.1/0.25/0.5`` are ``new-scene@0.1/0.25/0.5``, ``generic``
is ``new-scene@1`` and ``near-copy`` is ``ref-scene@0.25``.

Stress conditions (off by default; the gallery then renders as in version 2):
``siblings`` (0..1) makes a group's gallery identities share that fraction of their
markings with one common pattern (look-alikes); ``lookalikes`` (0..1) makes them come in look-alike
families of ``family_size`` (pairs by default): each gallery identity takes that share of its markings
from its family's pattern, in one region per family, so every identity has ``family_size - 1`` nearest
impostors (as real Re-ID galleries have) and the rest of the group stays as distinct as before;
``home_background`` (0..1) takes that
share of an identity's real images at its own home background, as camera sites do
in real re-identification data; ``occlusion`` puts an occluder over the region a graded
query's drift redraws (drift hidden from any encoder).
"""
# Over 500 lines by reason: the world's public face (config, identities, the build and its one writing path,
# serial or forked) in one place; a tenth of it is the docstring above. The method set, patterns and rendering
# are already their own modules (methods.py, patterns.py, render.py). The look-alike families (issue #32) are
# identity assignment, which is the World's own business, so they stay here; the drift truth is world/truth.py.
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from PIL import Image

from fpr.errors import InputError
from fpr.galleries.records import ImageRecord
from fpr.galleries.world.methods import (  # noqa: F401  (re-exported: the world's public names)
    CONTEXTS, COPY_CONTEXT, COPY_METHODS, DRIFT_LEVELS, GRADED_METHODS, METHOD_ALIASES, METHOD_CONTEXT,
    METHOD_DRIFT, METHODS, PROFILES, Profile, declared_drift, method_name)
from fpr.galleries.world.patterns import CANVAS, KINDS, SPECIES, Markings
from fpr.galleries.world.render import (
    FAMILIES,
    GALLERY_FAMILIES,
    NOVEL_FAMILIES,
    View,
    animal_layer,
    compose,
    covering_occluder,
    place_layer,
    render_view,
    sample_view,
)
from fpr.keys import keyed_rng

__all__ = ["SPECIES", "KINDS", "METHODS", "METHOD_DRIFT", "METHOD_CONTEXT", "METHOD_ALIASES", "CONTEXTS",
           "COPY_CONTEXT", "DRIFT_LEVELS", "GRADED_METHODS", "PROFILES", "Profile", "QuerySpec", "method_name",
           "declared_drift",
           "EVAL_RANGE", "TRAIN_RANGE", "GENERIC_RANGE", "VAL_RANGE", "COPY_METHODS", "WorldConfig", "World",
           "train_identities", "val_identities", "identity_view", "WORLD_VERSION", "Markings", "render_identity",
           "identity_markings", "check_disjoint", "identity_name", "parse_identity", "build_world", "WorldBuild",
           "GALLERY_FAMILIES", "NOVEL_FAMILIES", "FAMILIES", "CANVAS", "render_processes", "fork_safe"]

EVAL_RANGE = range(0, 100_000)
GALLERY_RANGE = range(0, 50_000)
GENERIC_RANGE = range(50_000, 100_000)
VAL_RANGE = range(100_000, 200_000)  # held-out identities that training validates on
TRAIN_RANGE = range(1_000_000, 2_000_000)
_FAMILY_SEED_BASE = 10_000_000  # shared sibling patterns
_DRIFT_SEED_BASE = 20_000_000  # resampled markings of drift queries
_LOOKALIKE_SEED_BASE = 30_000_000  # the patterns look-alike families share

WORLD_VERSION = "3"  # bump when rendering changes: part of training-data fingerprints
# 2: generations take new views (pose, viewpoint, size, position, mirror, lighting); real images
#    may face either way; copy-like methods paste-mirror, paste-rescale, edit, near-copy.
# 3: queries only: contexts (new-scene, ref-pose, ref-scene) crossed with drift, a view per method,
#    profiles. Real images and training renderings are bit-identical to version 2 (golden test), so
#    fpr-world-v3 (trained on version 2) still sees its own world.

@dataclass(frozen=True)
class QuerySpec:
    """What one world query is: the row's method, its context and drift, the profile it came from."""

    method: str  # as requested (a graded method, a copy, an alias or a profile name)
    rendered: str  # the graded or copy method actually rendered (an alias's target, a profile's draw)
    context: str
    drift: float
    profile: str = ""


def identity_name(species: str, ident: int) -> str:
    return f"{species}-{int(ident):07d}"


def parse_identity(name: str) -> tuple[str, int]:
    species, _, num = name.rpartition("-")
    if species not in SPECIES or not num.isdigit():
        raise InputError(f"not a world identity name '{name}'", hint="expected e.g. zebra-0000042")
    return species, int(num)


def check_disjoint(train_ids, eval_ids, *, eval_range: range = EVAL_RANGE) -> None:
    """Raise if any identity is used for both training and evaluation (or lies outside its range)."""
    train_ids, eval_ids = {int(i) for i in train_ids}, {int(i) for i in eval_ids}
    bad = [i for i in train_ids if i not in TRAIN_RANGE] + [i for i in eval_ids if i not in eval_range]
    if bad or (train_ids & eval_ids):
        raise InputError("world identities leak between training and evaluation",
                         where=f"e.g. {sorted(set(bad) | (train_ids & eval_ids))[:5]}")


def train_identities(species: str, n: int, seed: int = 0) -> list[int]:
    """``n`` training identities of a species (from TRAIN_RANGE), deterministic in ``seed``."""
    rng = keyed_rng("train-ids", seed, species)
    ids = sorted(int(i) + TRAIN_RANGE.start for i in rng.choice(len(TRAIN_RANGE), n, replace=False))
    check_disjoint(ids, [])
    return ids


def val_identities(species: str, n: int, seed: int = 0) -> list[int]:
    """``n`` held-out validation identities (from VAL_RANGE): neither trained on nor in evaluation worlds."""
    rng = keyed_rng("val-ids", seed, species)
    ids = sorted(int(i) + VAL_RANGE.start for i in rng.choice(len(VAL_RANGE), n, replace=False))
    check_disjoint([], ids, eval_range=VAL_RANGE)
    return ids


def identity_markings(species: str, ident: int, *, siblings: float = 0.0, family: int = 0) -> Markings:
    """The markings of identity ``ident``; with ``siblings`` > 0, that share comes from family ``family``."""
    if species not in SPECIES:
        raise InputError(f"unknown world species '{species}'", hint=f"valid: {', '.join(SPECIES)}")
    m = Markings(species, int(ident))
    if siblings > 0:
        m = m.with_layer(_FAMILY_SEED_BASE + int(family), float(siblings), f"sib-{int(ident)}")
    return m


def render_identity(species: str, ident: int, seed, *, size: int = 96, families=GALLERY_FAMILIES,
                    siblings: float = 0.0, family: int = 0, poses: str = "mixed") -> Image.Image:
    """One image of an identity; deterministic in (species, ident, seed, size, families, siblings, poses).

    ``poses``: "real" (photographs), "novel" (generations' new views) or "mixed" (either, half
    each: what the trainer renders, so the encoder knows the poses of both).
    """
    return render_view(identity_markings(species, ident, siblings=siblings, family=family),
                       identity_view(species, ident, seed, size=size, families=families, poses=poses))


def identity_view(species: str, ident: int, seed, *, size: int = 96, families=GALLERY_FAMILIES,
                  poses: str = "mixed") -> View:
    """The nuisance parameters :func:`render_identity` draws for these arguments (its background family and
    facing are the labels of a trainer that learns what a general-purpose encoder sees, not identity)."""
    rng = keyed_rng("view", species, int(ident), seed, size)
    if poses == "mixed":
        poses = "novel" if rng.random() < 0.5 else "real"
    return sample_view(rng, size, families, poses=poses)


@dataclass(frozen=True)
class WorldConfig:
    seed: int = 0
    species: tuple[str, ...] = SPECIES
    identities: int = 10  # per species (= group)
    gallery: int = 10  # gallery images per identity
    references: int = 3  # reference images per identity (never in the gallery)
    queries: int = 3  # queries per identity and method
    methods: tuple[str, ...] = METHODS  # graded (context@drift), copy controls, or their old names
    size: int = 96
    siblings: float = 0.0  # stress: gallery identities share this fraction of their markings (look-alikes)
    profiles: tuple[str, ...] = ()  # named method profiles (PROFILES), each a method of the world
    shared_view: bool = False  # control: query k of a context has one view for every drift level
    home_background: float = 0.0  # stress: share of real images taken at the identity's home background
    occlusion: bool = False  # stress: an occluder over the region query k's drift 0.25 redraws (drift hidden)
    lookalikes: float = 0.0  # difficulty: share of markings a gallery identity shares with its look-alike family
    family_size: int = 2  # identities per look-alike family (with lookalikes > 0)

    def __post_init__(self) -> None:
        unknown = [s for s in self.species if s not in SPECIES]
        if unknown:
            raise InputError(f"unknown world species '{unknown[0]}'", hint=f"valid: {', '.join(SPECIES)}")
        bad = [m for m in self.methods if m not in METHOD_DRIFT]
        if bad:
            raise InputError(f"unknown world method '{bad[0]}'",
                             hint=f"valid: context@drift with context in {', '.join(CONTEXTS)} and drift in "
                                  f"{', '.join(f'{d:g}' for d in DRIFT_LEVELS)}, or {', '.join(COPY_METHODS)}")
        bad = [p for p in self.profiles if p not in PROFILES]
        if bad:
            raise InputError(f"unknown world profile '{bad[0]}'", hint=f"valid: {', '.join(PROFILES)}")
        rendered = [METHOD_ALIASES.get(m, m) for m in self.methods] + list(self.profiles)
        twice = sorted({m for m in rendered if rendered.count(m) > 1})
        if twice:
            raise InputError(f"world method '{twice[0]}' requested twice (an old name is an alias of it)",
                             hint="list each method once")
        if not 64 <= self.size <= 256:
            raise InputError(f"world image size must be within 64..256, got {self.size}")
        if not 0.0 <= self.siblings < 1.0:
            raise InputError(f"siblings must be within [0, 1), got {self.siblings}")
        if not 0.0 <= self.lookalikes < 1.0:
            raise InputError(f"lookalikes must be within [0, 1), got {self.lookalikes}")
        if self.family_size < 2:
            raise InputError(f"a look-alike family needs >= 2 identities, got family_size {self.family_size}")
        if not 0.0 <= self.home_background <= 1.0:
            raise InputError(f"home_background must be within [0, 1], got {self.home_background}")
        if self.identities < 2 or self.gallery < 1 or self.references < 1 or self.queries < 1:
            raise InputError("a world needs >= 2 identities, >= 1 gallery, reference and query image each")


@dataclass
class WorldBuild:
    """What :meth:`World.write` produced."""

    root: Path
    records: list[ImageRecord]  # gallery + reference images (role set)
    queries: list[dict]  # rows of the queries manifest
    n_images: int
    seconds: float
    config: dict = field(default_factory=dict)

    @property
    def gallery_csv(self) -> Path:
        return self.root / "gallery.csv"

    @property
    def queries_csv(self) -> Path:
        return self.root / "queries.csv"


class World:
    """A concrete evaluation world: per species, ``identities`` gallery identities and their queries."""

    def __init__(self, config: WorldConfig | None = None):
        self.config = config or WorldConfig()
        c = self.config
        self.ids: dict[str, list[int]] = {}
        self.generic_ids: dict[str, list[int]] = {}
        for sp in c.species:
            rng = keyed_rng("world-ids", c.seed, sp)
            self.ids[sp] = sorted(int(i) for i in rng.choice(len(GALLERY_RANGE), c.identities, replace=False)
                                  + GALLERY_RANGE.start)
            self.generic_ids[sp] = [int(i) for i in rng.choice(len(GENERIC_RANGE), c.identities * c.queries,
                                                               replace=False) + GENERIC_RANGE.start]
        check_disjoint([], [i for v in list(self.ids.values()) + list(self.generic_ids.values()) for i in v])
        self.families: dict[str, dict[int, int]] = {}  # species -> gallery identity -> its look-alike family
        if c.lookalikes > 0:
            for sp in c.species:
                # its own random stream: the identities and every other draw are those of a world without it
                order = keyed_rng("lookalike-families", c.seed, sp).permutation(len(self.ids[sp]))
                self.families[sp] = {self.ids[sp][int(j)]: pos // c.family_size for pos, j in enumerate(order)}

    # -- markings and views
    def markings(self, species: str, ident: int) -> Markings:
        m = identity_markings(species, ident, siblings=self.config.siblings, family=self.config.seed)
        family = self.family(species, ident)
        if family is not None:  # the family's pattern, in one region per family (the same part of the body)
            m = m.with_layer(self.family_pattern(species, family), self.config.lookalikes,
                             f"look-{self.config.seed}-{family}")
        return m

    def family(self, species: str, ident: int) -> int | None:
        """The look-alike family of a gallery identity (None: look-alikes off, or not a gallery identity)."""
        return self.families.get(species, {}).get(int(ident))

    def family_members(self, species: str, ident: int) -> list[int]:
        """The gallery identities of ``ident``'s look-alike family, itself included (just itself when off)."""
        family = self.family(species, ident)
        if family is None:
            return [int(ident)]
        return sorted(i for i, f in self.families[species].items() if f == family)

    def family_pattern(self, species: str, family: int) -> int:
        """The pattern seed look-alike family ``family`` of ``species`` shares."""
        return _LOOKALIKE_SEED_BASE + int(keyed_rng("lookalike-pattern", self.config.seed, species,
                                                    int(family)).integers(1_000_000))

    def _view(self, species: str, ident: int, role: str, k: int, families) -> View:
        rng = keyed_rng("view", self.config.seed, species, ident, role, k, self.config.size)
        view = sample_view(rng, self.config.size, families, poses="real")
        if self.config.home_background > 0:
            # its own random stream, so the view is bit-identical to one without the stress condition
            home_rng = keyed_rng("home-draw", self.config.seed, species, ident, role, k)
            if home_rng.random() < self.config.home_background:
                family, bg_seed = self.home(species, ident)
                view = replace(view, family=family, bg_seed=bg_seed)
        return view

    def home(self, species: str, ident: int) -> tuple[str, int]:
        """The identity's home background (family, background seed): like a camera site, the same scene."""
        rng = keyed_rng("home", self.config.seed, species, ident)
        return str(GALLERY_FAMILIES[int(rng.integers(len(GALLERY_FAMILIES)))]), int(rng.integers(2 ** 31))

    def real_image(self, species: str, ident: int, role: str, k: int) -> Image.Image:
        return render_view(self.markings(species, ident), self._view(species, ident, role, k, GALLERY_FAMILIES))

    def query_spec(self, method: str, species: str, ident: int, k: int) -> QuerySpec:
        """What query ``k`` of ``method`` (a method, an old name or a profile) for this identity is."""
        c = self.config
        if method in PROFILES:
            mixture = PROFILES[method].mixture
            draw = keyed_rng("profile", c.seed, method, species, ident, k).choice(
                len(mixture), p=[w for _, w in mixture])
            rendered = mixture[int(draw)][0]
            return QuerySpec(method, rendered, METHOD_CONTEXT[rendered], METHOD_DRIFT[rendered], method)
        rendered = METHOD_ALIASES.get(method, method)
        if rendered not in METHOD_CONTEXT:
            raise InputError(f"unknown world method '{method}'",
                             hint="a method of fpr.galleries.world.METHODS, an old name or a profile "
                                  f"({', '.join(PROFILES)})")
        return QuerySpec(method, rendered, METHOD_CONTEXT[rendered], METHOD_DRIFT[rendered])

    def drifted_markings(self, species: str, ident: int, k: int, drift: float) -> Markings:
        """The markings of query ``k`` at ``drift``: the same for every context (and profile).

        The drift levels of query ``k`` redraw nested regions with one new pattern; drift 1 is another
        individual of the species that is not in the gallery (what a generator that ignores the subject makes).
        """
        c = self.config
        base = self.markings(species, ident)
        if drift <= 0:
            return base
        if drift >= 1:
            return self.markings(species, self.generic_ids[species][self.ids[species].index(ident) * c.queries + k])
        drift_seed = _DRIFT_SEED_BASE + int(keyed_rng("drift", c.seed, species, ident, k).integers(1_000_000))
        return base.with_layer(drift_seed, drift, f"drift-{c.seed}-{ident}-{k}")

    def query_image(self, method: str, species: str, ident: int, k: int) -> tuple[Image.Image, float, int]:
        """(image, ground-truth drift, index of the reference it was made from)."""
        spec = self.query_spec(method, species, ident, k)
        return self._render_query(spec, species, ident, k), spec.drift, int(k % self.config.references)

    def _render_query(self, spec: QuerySpec, species: str, ident: int, k: int) -> Image.Image:
        c = self.config
        ref_k = int(k % c.references)
        if spec.context == COPY_CONTEXT:
            rng = keyed_rng("query", c.seed, spec.rendered, species, ident, k)
            return self._copy_image(spec.rendered, self.markings(species, ident), species, ident, ref_k, rng)
        view = self.query_view(spec, species, ident, k)
        return render_view(self.drifted_markings(species, ident, k, spec.drift), view)

    def query_view(self, spec: QuerySpec, species: str, ident: int, k: int) -> View:
        """The view of graded query ``k`` (pose, scene, light, occluder) for its context."""
        c = self.config
        ref_k = int(k % c.references)
        # Views differ per method (a profile is one method), so a query's context never lines up with
        # another method's; the shared_view control gives query k of every drift level one view (world
        # version 2's paired design: its new-scene images are those of version 2's faithful/drift-*/generic).
        if c.shared_view:
            view_rng = (keyed_rng("query-view", c.seed, species, ident, k) if spec.context == "new-scene"
                        else keyed_rng("query-view", c.seed, spec.context, species, ident, k))
        else:
            view_rng = keyed_rng("query-view", c.seed, spec.profile or spec.rendered, species, ident, k)
        if spec.context == "ref-scene":
            ref_view = self._view(species, ident, "reference", ref_k, GALLERY_FAMILIES)
            view = replace(ref_view, noise_seed=int(view_rng.integers(2 ** 31)))
        else:
            view = sample_view(view_rng, c.size, NOVEL_FAMILIES, poses="novel")
        if spec.context == "ref-pose":  # the reference's layout (pose, size, position, facing), a new scene
            r = self._view(species, ident, "reference", ref_k, GALLERY_FAMILIES)
            view = replace(view, angle=r.angle, scale=r.scale, shift=r.shift, persp=r.persp, mesh=r.mesh,
                           mirror=r.mirror)
        if c.occlusion:
            view = replace(view, occlusion=self._hiding_occluder(species, ident, k, view))
        return view

    def _hiding_occluder(self, species: str, ident: int, k: int, view: View) -> tuple:
        """Stress ``occlusion``: an occluder over the body region that query ``k``'s drift 0.25 redraws.

        The same region for every drift level of the query (the levels are nested, so it holds all of 0.1
        and 0.25 and part of 0.5), so the occluder's presence does not itself tell the drift apart.
        """
        base = self.markings(species, ident).labels()
        region = self.drifted_markings(species, ident, k, 0.25).labels() != base
        return covering_occluder(region, view, keyed_rng("hide", self.config.seed, species, ident, k))

    def _copy_image(self, method: str, base: Markings, species: str, ident: int, ref_k: int,
                    rng: np.random.Generator) -> Image.Image:
        """A copy control made from reference ``ref_k`` (its pose, its pixels)."""
        ref_view = self._view(species, ident, "reference", ref_k, GALLERY_FAMILIES)
        new_bg = replace(ref_view, family=str(NOVEL_FAMILIES[int(rng.integers(len(NOVEL_FAMILIES)))]),
                         bg_seed=int(rng.integers(2 ** 31)), occlusion=None, noise_seed=int(rng.integers(2 ** 31)))
        layer = animal_layer(base, replace(ref_view, occlusion=None))
        if method == "paste":  # cut out, pasted on a new background with a small shift and scale change
            layer = place_layer(layer, scale=float(rng.uniform(0.97, 1.03)),
                                shift=tuple(float(v) for v in rng.uniform(-0.03, 0.03, 2)))
        elif method == "paste-mirror":  # flipped, small shift
            layer = place_layer(layer, mirror=True, shift=tuple(float(v) for v in rng.uniform(-0.03, 0.03, 2)))
        elif method == "paste-rescale":  # rescaled by 0.7-0.85 or 1.15-1.35, moved
            f = float(rng.uniform(0.7, 0.85) if rng.random() < 0.5 else rng.uniform(1.15, 1.35))
            layer = place_layer(layer, scale=f, shift=tuple(float(v) for v in rng.uniform(-0.15, 0.15, 2)))
        elif method == "edit":  # same place, new background, mild colour changes
            b, g, d, *tint = ref_view.light
            new_bg = replace(new_bg, light=(b * float(rng.uniform(0.88, 1.12)), g, d,
                                            *(t * float(rng.uniform(0.92, 1.08)) for t in tint)))
        else:  # pragma: no cover - validated in WorldConfig
            raise InputError(f"unknown world method '{method}'")
        return compose(layer, new_bg)

    # -- writing
    def write(self, root: str | Path, *, progress_desc: str = "rendering world", workers: int = 1,
              cache: bool = False) -> WorldBuild:
        """Render gallery, references and queries as PNGs under ``root``; write gallery.csv and queries.csv.

        ``workers`` > 1: render in that many forked processes, an identity per task (its markings are
        computed once there); the files and both tables are byte for byte those of one process (every
        image is a pure function of the config and its job), and the tables are made here, in job order.
        ``cache``: take the files from the world cache (:mod:`fpr.galleries.world.cache`) when it holds this
        world, else render and store them there; the same bytes either way. ``FPR_WORLD_CACHE=0`` turns it off.
        """
        import pandas as pd

        from fpr.tables import write_table

        start = time.perf_counter()
        c = self.config
        root = Path(root).expanduser().resolve()
        records: list[ImageRecord] = []
        queries: list[dict] = []
        jobs: list[_Job] = []
        for sp in c.species:
            for ident in self.ids[sp]:
                name = identity_name(sp, ident)
                for role, n in (("reference", c.references), ("gallery", c.gallery)):
                    for k in range(n):
                        path = root / ("references" if role == "reference" else "gallery") / sp / name / f"{k:02d}.png"
                        jobs.append(_Job("real", sp, ident, role, k, path))
                for method in c.methods + c.profiles:
                    for k in range(c.queries):
                        path = root / "queries" / method / sp / f"{name}-{k}.png"
                        jobs.append(_Job("query", sp, ident, method, k, path))
        for folder in sorted({job.path.parent for job in jobs}):
            folder.mkdir(parents=True, exist_ok=True)
        self._render_or_fetch(jobs, root, progress_desc, workers, cache)
        ref_paths: dict[tuple[str, int], list[str]] = {}
        for job in jobs:
            name = identity_name(job.species, job.ident)
            if job.kind == "real":
                records.append(ImageRecord(str(job.path), name, job.species, job.what, split="eval"))
                if job.what == "reference":
                    ref_paths.setdefault((job.species, job.ident), []).append(str(job.path))
            else:
                spec = self.query_spec(job.what, job.species, job.ident, job.k)
                refs = ref_paths[(job.species, job.ident)]
                made_from_ref = spec.context in (COPY_CONTEXT, "ref-pose", "ref-scene")
                queries.append({"query_id": f"{job.what}/{name}/{job.k}", "path": str(job.path), "identity": name,
                                "group": job.species, "method": job.what, "context": spec.context,
                                "drift": spec.drift, "profile": spec.profile, "prompt": f"a photo of [V] {job.species}",
                                "reference_paths": ";".join(refs),
                                "source_reference": refs[job.k % c.references] if made_from_ref else ""})
        # the files name images relative to their own folder (the readers resolve them there), so a
        # world moved or copied with its folder (or with the workspace holding it) still reads
        def rel(paths: str) -> str:
            return ";".join(Path(p).relative_to(root).as_posix() for p in paths.split(";") if p)

        write_table(pd.DataFrame([{"path": rel(r.path), "identity": r.identity, "group": r.group, "role": r.role}
                                  for r in records]), root / "gallery.csv")
        write_table(pd.DataFrame([{**q, **{k: rel(q[k]) for k in ("path", "reference_paths", "source_reference")}}
                                  for q in queries]), root / "queries.csv")
        return WorldBuild(root, records, queries, len(jobs), time.perf_counter() - start, asdict(c))

    def _render_or_fetch(self, jobs: list[_Job], root: Path, desc: str, workers: int, cache: bool) -> None:
        from fpr.galleries.world.cache import WorldCache, entry_key

        store = WorldCache.default() if cache else None
        files = [job.path.relative_to(root).as_posix() for job in jobs]
        key = entry_key(asdict(self.config)) if store is not None else ""
        if store is not None and store.fetch(key, files, root):
            return
        self._render_jobs(jobs, desc, workers)
        if store is not None:
            store.store(key, files, root, asdict(self.config))

    def render_job(self, job: _Job) -> None:
        """Render one image of :meth:`write` and save it as PNG at ``job.path``."""
        if job.kind == "real":
            img = self.real_image(job.species, job.ident, job.what, job.k)
        else:
            img = self._render_query(self.query_spec(job.what, job.species, job.ident, job.k), job.species,
                                     job.ident, job.k)
        _save_png(img, job.path)

    def _render_jobs(self, jobs: list[_Job], desc: str, workers: int) -> None:
        from fpr import progress

        n = render_processes(workers, len(jobs))
        if n <= 1:
            for job in progress.bar(jobs, desc=desc, unit="img"):
                self.render_job(job)
            return
        tasks: dict[tuple[str, int], list[_Job]] = {}
        for job in jobs:
            tasks.setdefault((job.species, job.ident), []).append(job)
        with ProcessPoolExecutor(n, mp_context=mp.get_context("fork")) as pool, \
                progress.bar(total=len(jobs), desc=f"{desc} ({n} processes)", unit="img") as bar:
            futures = {pool.submit(_render_task, self, task): len(task) for task in tasks.values()}
            for fut in as_completed(futures):
                fut.result()  # a worker's error is raised here, as it would be in one process
                bar.update(futures[fut])


@dataclass(frozen=True)
class _Job:
    """One image of :meth:`World.write`: a real image (role, k) or a query (method, k) of an identity."""

    kind: str  # "real" | "query"
    species: str
    ident: int
    what: str  # role or method
    k: int
    path: Path


def _render_task(world: World, jobs: list[_Job]) -> None:
    for job in jobs:
        world.render_job(job)


def render_processes(workers: int, n_jobs: int) -> int:
    """How many processes :meth:`World.write` renders in: ``workers`` (0: one per usable core), at most 8,
    and one where forking is unavailable or unsafe (not the main thread, Ray started) or the world is tiny."""
    if workers == 0:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if workers <= 1 or n_jobs < 64 or not fork_safe():
        return 1
    return min(workers, 8)


def fork_safe() -> bool:
    """Whether this process may fork workers: fork exists, this is the main thread, no Ray runtime started."""
    return ("fork" in mp.get_all_start_methods() and threading.current_thread() is threading.main_thread()
            and not _ray_running())


def _ray_running() -> bool:
    """A process with Ray's threads (a started Ray runtime) must not fork; Ray merely imported may."""
    ray = sys.modules.get("ray")
    return ray is not None and bool(getattr(ray, "is_initialized", lambda: True)())


def _save_png(img: Image.Image, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    img.save(tmp, format="PNG", compress_level=1)
    tmp.replace(path)


def build_world(root: str | Path, *, workers: int = 1, cache: bool = False, **config) -> WorldBuild:
    """Render a world under ``root`` (``config``: :class:`WorldConfig` fields); the source for ``import_gallery``.
    ``workers``: render processes (0: one per core; the files are the same bytes whatever the number);
    ``cache``: through the world cache (``$FPR_CACHE_DIR/worlds``: rendered once per code and config).

        build = build_world("world", seed=0, identities=10)
        fpr.api.import_gallery("world", build.records, source="world")
        fpr.api.run_query(index, build.queries_csv)
    """
    for key in ("species", "methods", "profiles"):  # lists from callers, tuples in the frozen config
        if config.get(key) is not None:
            config[key] = tuple(config[key])
    return World(WorldConfig(**config)).write(root, workers=workers, cache=cache)
