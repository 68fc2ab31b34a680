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
ground-truth ``drift``, see :data:`METHODS`):

- ``faithful`` (drift 0): the same markings in a *novel view* (a new pose and
  viewpoint, size, position, possibly mirrored, new lighting; ``render.POSES``)
  on a background family that no real image has (:data:`NOVEL_FAMILIES`);
- ``drift-0.1``/``drift-0.25``/``drift-0.5``: that fraction of the markings
  resampled, calibrated per species by changed pixels (see
  :func:`fpr.galleries.world.patterns.calibrated_region`);
- ``generic`` (drift 1): another individual of the same species that is *not*
  in the gallery -- what a generator that ignores the subject produces ("a photo
  of a zebra"); its mAP is the chance level of the group;
- copy-like methods (:data:`COPY_METHODS`), made from one reference image:
  ``paste`` (its animal cut out and pasted on a new background with a small
  shift/scale), ``paste-mirror`` (flipped), ``paste-rescale`` (rescaled by
  0.7-0.85 or 1.15-1.35 and moved), ``edit`` (in place, background replaced,
  mild colour changes) and ``near-copy`` (the whole reference scene kept, 25% of
  the markings redrawn) -- the failures that retrieval rewards and the
  copy-paste scorer must flag.

Query ``k`` of an identity shares its pose, background, lighting and occlusion
across ``faithful``/``drift-*``/``generic``, and the drift levels resample nested
regions with one new pattern, so methods differ only in their markings (a paired,
dose-response design: method differences are not drowned by nuisance noise).

The ``siblings`` knob (0..1) makes a group's gallery identities share that
fraction of their markings with one common pattern: harder galleries.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from PIL import Image

from fpr.errors import InputError
from fpr.galleries.records import ImageRecord
from fpr.galleries.world.patterns import CANVAS, KINDS, SPECIES, Markings
from fpr.galleries.world.render import (
    FAMILIES,
    GALLERY_FAMILIES,
    NOVEL_FAMILIES,
    View,
    animal_layer,
    compose,
    place_layer,
    render_view,
    sample_view,
)
from fpr.keys import keyed_rng

__all__ = ["SPECIES", "KINDS", "METHODS", "METHOD_DRIFT", "EVAL_RANGE", "TRAIN_RANGE", "GENERIC_RANGE",
           "VAL_RANGE", "COPY_METHODS", "NEAR_COPY_DRIFT", "WorldConfig", "World", "train_identities", "val_identities", "identity_view", "WORLD_VERSION", "Markings", "render_identity", "identity_markings", "check_disjoint",
           "identity_name", "parse_identity", "build_world", "WorldBuild", "GALLERY_FAMILIES", "NOVEL_FAMILIES", "FAMILIES", "CANVAS"]

EVAL_RANGE = range(0, 100_000)
GALLERY_RANGE = range(0, 50_000)
GENERIC_RANGE = range(50_000, 100_000)
VAL_RANGE = range(100_000, 200_000)  # held-out identities that training validates on
TRAIN_RANGE = range(1_000_000, 2_000_000)
_FAMILY_SEED_BASE = 10_000_000  # shared sibling patterns
_DRIFT_SEED_BASE = 20_000_000  # resampled markings of drift queries

WORLD_VERSION = "2"  # bump when rendering changes: part of training-data fingerprints
# 2: generations take new views (pose, viewpoint, size, position, mirror, lighting); real images
#    may face either way; copy-like methods paste-mirror, paste-rescale, edit, near-copy.

NEAR_COPY_DRIFT = 0.25  # share of the markings a near-copy redraws
# The declared ground-truth drift is identity-wise: a copy of a reference image (paste, paste-mirror,
# paste-rescale, edit) shows the identity's own markings unchanged, so 0; near-copy redraws
# NEAR_COPY_DRIFT of them by construction. That copies are not novel generations is the copy-paste
# scorer's business, not the drift truth's (docs/world.md, "Declared truth of the copy-like methods").
METHOD_DRIFT = {"faithful": 0.0, "drift-0.1": 0.1, "drift-0.25": 0.25, "drift-0.5": 0.5, "generic": 1.0,
                "paste": 0.0, "paste-mirror": 0.0, "paste-rescale": 0.0, "edit": 0.0, "near-copy": NEAR_COPY_DRIFT}
METHODS = tuple(METHOD_DRIFT)
# Methods that reproduce a reference image (its pixels, its pose) instead of re-rendering the subject.
COPY_METHODS = ("paste", "paste-mirror", "paste-rescale", "edit", "near-copy")


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
    methods: tuple[str, ...] = METHODS
    size: int = 96
    siblings: float = 0.0

    def __post_init__(self) -> None:
        unknown = [s for s in self.species if s not in SPECIES]
        if unknown:
            raise InputError(f"unknown world species '{unknown[0]}'", hint=f"valid: {', '.join(SPECIES)}")
        bad = [m for m in self.methods if m not in METHOD_DRIFT]
        if bad:
            raise InputError(f"unknown world method '{bad[0]}'", hint=f"valid: {', '.join(METHODS)}")
        if not 64 <= self.size <= 256:
            raise InputError(f"world image size must be within 64..256, got {self.size}")
        if not 0.0 <= self.siblings < 1.0:
            raise InputError(f"siblings must be within [0, 1), got {self.siblings}")
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

    # -- markings and views
    def markings(self, species: str, ident: int) -> Markings:
        return identity_markings(species, ident, siblings=self.config.siblings, family=self.config.seed)

    def _view(self, species: str, ident: int, role: str, k: int, families) -> View:
        rng = keyed_rng("view", self.config.seed, species, ident, role, k, self.config.size)
        return sample_view(rng, self.config.size, families, poses="real")

    def real_image(self, species: str, ident: int, role: str, k: int) -> Image.Image:
        return render_view(self.markings(species, ident), self._view(species, ident, role, k, GALLERY_FAMILIES))

    def query_image(self, method: str, species: str, ident: int, k: int) -> tuple[Image.Image, float, int]:
        """(image, ground-truth drift, index of the reference it was made from)."""
        c = self.config
        rng = keyed_rng("query", c.seed, method, species, ident, k)
        # Query k of an identity has the same pose, background, lighting and occlusion for every
        # generative method, and the drift levels resample nested regions with the same new
        # pattern: methods differ only in their markings (a paired, dose-response design).
        view_rng = keyed_rng("query-view", c.seed, species, ident, k)
        ref_k = int(k % c.references)
        base = self.markings(species, ident)
        drift = METHOD_DRIFT[method]
        if method == "faithful":
            m = base
        elif method.startswith("drift-"):
            drift_seed = _DRIFT_SEED_BASE + int(keyed_rng("drift", c.seed, species, ident, k).integers(1_000_000))
            m = base.with_layer(drift_seed, drift, f"drift-{c.seed}-{ident}-{k}")
        elif method == "generic":
            i = self.ids[species].index(ident) * c.queries + k
            m = self.markings(species, self.generic_ids[species][i])
        else:
            return self._copy_image(method, base, species, ident, ref_k, rng), drift, ref_k
        return render_view(m, sample_view(view_rng, c.size, NOVEL_FAMILIES, poses="novel")), drift, ref_k

    def _copy_image(self, method: str, base: Markings, species: str, ident: int, ref_k: int,
                    rng: np.random.Generator) -> Image.Image:
        """A copy-like generation made from reference ``ref_k`` (its pose, its pixels)."""
        c = self.config
        ref_view = self._view(species, ident, "reference", ref_k, GALLERY_FAMILIES)
        if method == "near-copy":  # the reference's whole scene, part of the markings redrawn
            drift_seed = _DRIFT_SEED_BASE + int(keyed_rng("near", c.seed, species, ident, ref_k).integers(1_000_000))
            m = base.with_layer(drift_seed, NEAR_COPY_DRIFT, f"near-{c.seed}-{ident}-{ref_k}")
            return render_view(m, replace(ref_view, noise_seed=int(rng.integers(2 ** 31))))
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
    def write(self, root: str | Path, *, progress_desc: str = "rendering world") -> WorldBuild:
        """Render gallery, references and queries as PNGs under ``root``; write gallery.csv and queries.csv."""
        import pandas as pd

        from fpr import progress
        from fpr.tables import write_table

        start = time.perf_counter()
        c = self.config
        root = Path(root).expanduser().resolve()
        records: list[ImageRecord] = []
        queries: list[dict] = []
        jobs = []
        for sp in c.species:
            for ident in self.ids[sp]:
                name = identity_name(sp, ident)
                for role, n in (("reference", c.references), ("gallery", c.gallery)):
                    for k in range(n):
                        path = root / ("references" if role == "reference" else "gallery") / sp / name / f"{k:02d}.png"
                        jobs.append(("real", sp, ident, role, k, path))
                for method in c.methods:
                    for k in range(c.queries):
                        path = root / "queries" / method / sp / f"{name}-{k}.png"
                        jobs.append(("query", sp, ident, method, k, path))
        ref_paths: dict[tuple[str, int], list[str]] = {}
        for kind, sp, ident, what, k, path in progress.bar(jobs, desc=progress_desc, unit="img"):
            path.parent.mkdir(parents=True, exist_ok=True)
            name = identity_name(sp, ident)
            if kind == "real":
                img = self.real_image(sp, ident, what, k)
                _save_png(img, path)
                records.append(ImageRecord(str(path), name, sp, what, split="eval"))
                if what == "reference":
                    ref_paths.setdefault((sp, ident), []).append(str(path))
            else:
                img, drift, ref_k = self.query_image(what, sp, ident, k)
                _save_png(img, path)
                refs = ref_paths[(sp, ident)]
                queries.append({"query_id": f"{what}/{name}/{k}", "path": str(path), "identity": name, "group": sp,
                                "method": what, "prompt": f"a photo of [V] {sp}",
                                "reference_paths": ";".join(refs), "drift": drift,
                                "source_reference": refs[ref_k] if what in COPY_METHODS else ""})
        # the files name images relative to their own folder (the readers resolve them there), so a
        # world moved or copied with its folder (or with the workspace holding it) still reads
        def rel(paths: str) -> str:
            return ";".join(Path(p).relative_to(root).as_posix() for p in paths.split(";") if p)

        write_table(pd.DataFrame([{"path": rel(r.path), "identity": r.identity, "group": r.group, "role": r.role}
                                  for r in records]), root / "gallery.csv")
        write_table(pd.DataFrame([{**q, **{k: rel(q[k]) for k in ("path", "reference_paths", "source_reference")}}
                                  for q in queries]), root / "queries.csv")
        return WorldBuild(root, records, queries, len(jobs), time.perf_counter() - start, asdict(c))


def _save_png(img: Image.Image, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    img.save(tmp, format="PNG", compress_level=1)
    tmp.replace(path)


def build_world(root: str | Path, **config) -> WorldBuild:
    """Render a world under ``root`` (``config``: :class:`WorldConfig` fields); the source for ``import_gallery``.

        build = build_world("world", seed=0, identities=10)
        fpr.api.import_gallery("world", build.records, source="world")
        fpr.api.run_query(index, build.queries_csv)
    """
    species = config.pop("species", None)
    methods = config.pop("methods", None)
    if species is not None:
        config["species"] = tuple(species)
    if methods is not None:
        config["methods"] = tuple(methods)
    return World(WorldConfig(**config)).write(root)
