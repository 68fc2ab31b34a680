"""Training data sources for ``fpr encoders train``: the built-in world and identity-labelled records.

Each implements :class:`fpr.encoders.train.TrainSource`'s interface (``classes``,
``dataset(preprocess, seed)``, ``validation()``, ``fingerprint()``, ``describe()``)
without importing the encoders layer: ``preprocess`` is any callable image -> tensor.
"""
from __future__ import annotations

import itertools
import json
import math
from typing import Sequence

import numpy as np
import torch
from PIL import Image

from fpr import keys
from fpr.errors import InputError
from fpr.galleries.records import ImageRecord
from fpr.galleries.world.render import FAMILIES
from fpr.keys import keyed_rng

# Twin classes draw their redrawn share from pattern families far above any evaluation world's seed.
TWIN_FAMILY_BASE = 10_000_000


class _WorldEpochs(torch.utils.data.Dataset):
    def __init__(self, items: list[tuple[str, int, bool]], per_identity: int, seed: int, render_size: int,
                 preprocess, poses: str = "mixed", twins: float = 0.0):
        self.items, self.k, self.seed = items, per_identity, seed
        self.render_size, self.preprocess, self.poses, self.twins = render_size, preprocess, poses, twins

    def __len__(self) -> int:
        return len(self.items) * self.k

    def __getitem__(self, index: tuple[int, int]):
        from fpr.galleries.world import render_identity

        epoch, i = index
        c, k = divmod(i, self.k)
        species, ident, twin = self.items[c]
        img = render_identity(species, ident, f"train|{self.seed}|{epoch}|{k}{'|twin' if twin else ''}",
                              size=self.render_size, poses=self.poses, siblings=self.twins if twin else 0.0,
                              family=TWIN_FAMILY_BASE + ident)
        return self.preprocess(img), c


# What a general-purpose encoder (CLIP, DINOv2) sees in a world image and what an attribute-labelled
# trainer may learn: never the identity. Values in a fixed order: a class is one tuple of them.
ATTRIBUTES = {
    "species": None,  # filled from the source's species
    "background": FAMILIES,
    "facing": ("right", "left"),
    "pose": ("real", "novel"),
}


def parse_labels(labels: str | Sequence[str]) -> tuple[str, ...]:
    """``identity`` (the default) or a comma list of :data:`ATTRIBUTES` names, e.g. ``species,background,facing``."""
    names = tuple(x.strip() for x in (labels.split(",") if isinstance(labels, str) else labels) if x.strip())
    if names == ("identity",):
        return names
    bad = [n for n in names if n not in ATTRIBUTES]
    if not names or bad or len(set(names)) != len(names):
        raise InputError(f"--labels must be 'identity' or a comma list of {', '.join(ATTRIBUTES)} without repeats, "
                         f"got '{','.join(names)}'", hint="e.g. --labels species,background,facing")
    return names


def _view_attributes(species: str, view, poses: str) -> dict[str, str]:
    return {"species": species, "background": view.family, "facing": "left" if view.mirror else "right",
            "pose": poses}


class _WorldAttributeEpochs(torch.utils.data.Dataset):
    """Training identities rendered afresh every epoch; the class is the image's attribute tuple."""

    def __init__(self, items: list[tuple[str, int]], per_identity: int, seed: int, render_size: int, preprocess,
                 labels: tuple[str, ...], class_index: dict[tuple[str, ...], int]):
        self.items, self.k, self.seed, self.render_size = items, per_identity, seed, render_size
        self.preprocess, self.labels, self.class_index = preprocess, labels, class_index

    def __len__(self) -> int:
        return len(self.items) * self.k

    def __getitem__(self, index: tuple[int, int]):
        from fpr.galleries.world import identity_markings, identity_view
        from fpr.galleries.world.render import render_view

        epoch, i = index
        c, k = divmod(i, self.k)
        species, ident = self.items[c]
        # the pose set is drawn here (not inside identity_view) so that it can be a label
        key = f"train-attr|{self.seed}|{epoch}|{k}"
        poses = "novel" if keyed_rng("pose", species, ident, key).random() < 0.5 else "real"
        view = identity_view(species, ident, key, size=self.render_size, families=FAMILIES, poses=poses)
        attrs = _view_attributes(species, view, poses)
        img = render_view(identity_markings(species, ident), view)
        return self.preprocess(img), self.class_index[tuple(attrs[n] for n in self.labels)]


class WorldSource:
    """The built-in world: training identities rendered afresh every epoch (no fixed image set)."""

    def __init__(self, *, species: Sequence[str] | None = None, identities: int = 400, per_identity: int = 4,
                 render_size: int = 96, seed: int = 0, val_identities: int = 10, val_images: int = 8,
                 poses: str = "mixed", twins: float = 0.0):
        """``poses``: what training images show (``mixed``: photographs and generations' new views, half
        each; ``real``: photographs only; see :func:`fpr.galleries.world.render_identity`).

        ``twins`` in [0, 1): when above 0, every training identity gets a *twin* class, the same animal
        with that share of its markings redrawn (a new pattern on one blob-shaped region of the body,
        as the world's drift does). Telling an identity from its twin is the finer task the metric is
        about: an encoder trained on it ranks partly changed markings below the exact ones instead of
        matching on whichever part survived."""
        from fpr.galleries.world import SPECIES, WORLD_VERSION, train_identities

        self.species = tuple(species or SPECIES)
        self.identities, self.per_identity, self.render_size = identities, per_identity, render_size
        self.seed, self.val_identities, self.val_images = seed, val_identities, val_images
        if not 0.0 <= twins < 1.0:
            raise InputError(f"--twins must be in [0, 1), got {twins}", hint="e.g. --twins 0.25; 0 = no twin classes")
        self.poses, self.twins = poses, float(twins)
        self.version = WORLD_VERSION
        self.items = [(sp, i, twin) for twin in ((False, True) if self.twins else (False,))
                      for sp in self.species for i in train_identities(sp, identities, seed)]
        self.classes = [f"{sp}/{i}" + ("~twin" if twin else "") for sp, i, twin in self.items]
        self.name = "world"

    def dataset(self, preprocess, seed):
        return _WorldEpochs(self.items, self.per_identity, seed, self.render_size, preprocess, self.poses,
                            self.twins)

    def validation(self):
        from fpr.galleries.world import render_identity, val_identities

        out = []
        for sp in self.species:
            for ident in val_identities(sp, self.val_identities, 0):
                for k in range(self.val_images):
                    out.append((render_identity(sp, ident, f"val|{k}", size=self.render_size, poses=self.poses),
                                f"{sp}/{ident}", sp))
        return out

    def describe(self):
        return {"name": "world", "world_version": self.version, "species": list(self.species),
                "identities_per_species": self.identities, "images_per_identity_per_epoch": self.per_identity,
                "render_size": self.render_size, "identity_seed": self.seed, "n_classes": len(self.classes),
                "validation": f"{self.val_identities} held-out identities x {self.val_images} images per species",
                **({"poses": self.poses} if self.poses != "mixed" else {}),
                **({"twins": self.twins} if self.twins else {})}

    def fingerprint(self):
        return "sha256:" + keys.sha256_hex(json.dumps(self.describe(), sort_keys=True))


def _augment(img: Image.Image, rng: np.random.Generator) -> Image.Image:
    w, h = img.size
    s = rng.uniform(0.7, 1.0)
    r = rng.uniform(0.85, 1.15)
    cw, ch = min(w, int(w * s * math.sqrt(r))), min(h, int(h * s / math.sqrt(r)))
    x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    img = img.crop((x, y, x + cw, y + ch)).rotate(float(rng.uniform(-10, 10)), resample=Image.BILINEAR)
    arr = np.asarray(img, np.float32) * rng.uniform(0.8, 1.2) + rng.uniform(-20, 20)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")


class _RecordsEpochs(torch.utils.data.Dataset):
    def __init__(self, rows: list[tuple[str, int]], seed: int, preprocess):
        self.rows, self.seed, self.preprocess = rows, seed, preprocess

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: tuple[int, int]):
        from fpr.images import load_rgb

        epoch, i = index
        path, c = self.rows[i]
        rng = np.random.default_rng([self.seed, epoch, i])
        return self.preprocess(_augment(load_rgb(path), rng)), c


class RecordsSource:
    """Images with identity labels (a manifest or a stored gallery); a share of identities held out for validation.

    A class is a (group, identity) pair. Validation identities (``val_fraction``
    of each group's identities with at least 2 images, at least 2 per group when
    the group has 4+) are never trained on.
    """

    def __init__(self, records: list[ImageRecord], *, name: str = "records", seed: int = 0, val_fraction: float = 0.2,
                 val_max_images: int = 10):
        if not records:
            raise InputError("no training images", where=name)
        by_key: dict[tuple[str, str], list[str]] = {}
        for r in records:
            by_key.setdefault((r.group, r.identity), []).append(r.path)
        rng = np.random.default_rng(seed)
        val_keys: set = set()
        groups = sorted({g for g, _ in by_key})
        for g in groups:
            keys = sorted(k for k in by_key if k[0] == g and len(by_key[k]) >= 2)
            n_val = int(round(len(keys) * val_fraction))
            if len(keys) >= 4:
                n_val = max(2, n_val)
            n_val = min(n_val, len(keys) - 2) if len(keys) > 2 else 0
            if n_val >= 2:
                val_keys.update(keys[i] for i in rng.choice(len(keys), n_val, replace=False))
        train_keys = sorted(k for k in by_key if k not in val_keys)
        if len(train_keys) < 2:
            raise InputError(f"need at least 2 training identities, found {len(train_keys)}", where=name)
        self.name = name
        self.classes = [f"{g}/{i}" for g, i in train_keys]
        self.rows = [(p, c) for c, k in enumerate(train_keys) for p in sorted(by_key[k])]
        self.val = [(p, f"{k[0]}/{k[1]}", k[0]) for k in sorted(val_keys) for p in sorted(by_key[k])[:val_max_images]]
        self._hashes = sorted(f"{r.content_hash or r.path}|{r.group}|{r.identity}" for r in records)
        self.seed, self.val_fraction = seed, val_fraction

    def dataset(self, preprocess, seed):
        return _RecordsEpochs(self.rows, seed, preprocess)

    def validation(self):
        from fpr.images import load_rgb

        return [(load_rgb(p), key, g) for p, key, g in self.val]

    def describe(self):
        return {"name": self.name, "n_images": len(self.rows), "n_classes": len(self.classes),
                "n_val_images": len(self.val), "val_fraction": self.val_fraction, "split_seed": self.seed}

    def fingerprint(self):
        h = keys.hasher()
        for line in self._hashes:
            h.update(line.encode() + b"\n")
        return "sha256:" + h.hexdigest()


class WorldAttributesSource(WorldSource):
    """The built-in world labelled by what a general-purpose encoder sees (``labels``: species, background
    family, facing, pose set), *never* by identity: a stand-in for CLIP/DINOv2 on the world.

    Images are the training identities' (TRAIN_RANGE) rendered afresh every epoch on every background
    family (the generations' novel ones too: a web-trained encoder has seen snow and beaches); a class is
    one combination of the label values, so identities of a species share all their classes. Validation
    is the identity oracle mAP on held-out identities, as for an identity-trained encoder: how much
    identity the attribute features carry by accident.
    """

    def __init__(self, *, labels: Sequence[str] = ("species", "background", "facing"), **kw):
        if kw.get("twins"):
            raise InputError("--twins needs identity labels", hint="drop --twins or use --labels identity")
        super().__init__(**kw)
        self.labels = parse_labels(labels)
        if self.labels == ("identity",):  # pragma: no cover - the workflow picks WorldSource then
            raise InputError("WorldAttributesSource needs attribute labels")
        values = [self.species if n == "species" else ATTRIBUTES[n] for n in self.labels]
        self.classes = ["/".join(t) for t in itertools.product(*values)]
        self._class_index = {tuple(c.split("/")): i for i, c in enumerate(self.classes)}
        self.attr_items = [(sp, i) for sp, i, _twin in self.items]

    def dataset(self, preprocess, seed):
        return _WorldAttributeEpochs(self.attr_items, self.per_identity, seed, self.render_size, preprocess,
                                     self.labels, self._class_index)

    def describe(self):
        return {**super().describe(), "labels": list(self.labels), "identity_labels": False,
                "train_backgrounds": list(FAMILIES)}
