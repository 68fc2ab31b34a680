"""Training specialized encoders: ``fpr encoders train``.

General over data and architecture: a *source* yields identity-labelled images
(the built-in world, rendered afresh every epoch; or a list of
:class:`~fpr.galleries.records.ImageRecord` from a manifest or a stored gallery,
augmented every epoch), the network is a built-in small CNN or any timm model
with a BatchNorm + linear neck, and the loss is a normalised-softmax (cosine)
classifier over the training identities, optionally with an additive cosine
margin (``--margin``; a large ArcFace-style margin collapsed in an early trial,
the default is a small one).

Each epoch ends with a validation on *held-out identities*: every validation
image queries the others of its group and the oracle mAP (real images as
queries) is logged on stderr. The output is a folder with ``model.safetensors``
and the card ``fpr-encoder.json`` that :mod:`fpr.encoders.trained` turns into a
registered encoder -- or, with ``flat=True``, ``<id>.safetensors`` + ``<id>.json``
(the layout of the encoder shipped inside the package).

The paper's SP-Cars encoder is trained the same way::

    fpr encoders train --source cars_train.csv --arch efficientnetv2_rw_m --pretrained \\
        --size 480 --id effnetv2-cars --epochs 30 --batch-size 32 --device cuda
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from PIL import Image
from torch import nn

from fpr import progress
from fpr.encoders.preprocess import Preprocessing
from fpr.encoders.registry import pick_device
from fpr.encoders.trained import CARD_FORMAT, CARD_NAME, WEIGHTS_NAME, build_network, check_arch
from fpr.encoders.weights import weights_dir
from fpr.errors import InputError
from fpr.galleries.records import ImageRecord

ID_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass
class TrainConfig:
    arch: str = "fpr-cnn-grid"
    size: int = 64  # network input side
    dim: int = 128
    epochs: int = 20
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 5e-4
    scale: float = 24.0  # cosine-classifier temperature
    margin: float = 0.1  # additive cosine margin (0 = plain normalised softmax)
    warmup: float = 0.05  # fraction of steps with a linear warm-up
    seed: int = 0
    device: str = "auto"
    workers: int | None = None
    threads: int | None = None  # PyTorch CPU threads; None = one per CPU not used by a loader worker
    steps_per_epoch: int | None = None  # cap (for smoke tests); None = the whole epoch
    pretrained: bool = False  # timm ImageNet weights (downloads unless cached)
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)

    def preprocessing(self) -> Preprocessing:
        return Preprocessing(name=f"squash{self.size}-imagenet", size=self.size, mean=tuple(self.mean),
                             std=tuple(self.std))

    def check(self) -> None:
        check_arch(self.arch)
        for name in ("size", "dim", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise InputError(f"{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
        if self.size < 32:
            raise InputError(f"input size must be at least 32, got {self.size}")
        if self.batch_size < 2:
            raise InputError("batch size must be at least 2 (BatchNorm)")


# ----------------------------------------------------------------------------- sources

class TrainSource:
    """Identity-labelled images for training plus a held-out validation set."""

    name: str = "source"
    classes: list[str]

    def dataset(self, preprocess: Preprocessing, seed: int) -> torch.utils.data.Dataset:
        """A dataset indexed by ``(epoch, i)`` with ``len()`` images per epoch (fresh images every epoch)."""
        raise NotImplementedError

    def validation(self) -> list[tuple[Image.Image, str, str]]:
        """(image, identity key, group) of held-out identities; may be empty."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.name, "n_classes": len(self.classes)}


class _WorldEpochs(torch.utils.data.Dataset):
    def __init__(self, items: list[tuple[str, int]], per_identity: int, seed: int, render_size: int,
                 preprocess: Preprocessing):
        self.items, self.k, self.seed = items, per_identity, seed
        self.render_size, self.preprocess = render_size, preprocess

    def __len__(self) -> int:
        return len(self.items) * self.k

    def __getitem__(self, index: tuple[int, int]):
        from fpr.galleries.world import render_identity

        epoch, i = index
        c, k = divmod(i, self.k)
        species, ident = self.items[c]
        img = render_identity(species, ident, f"train|{self.seed}|{epoch}|{k}", size=self.render_size)
        return self.preprocess(img), c


class WorldSource(TrainSource):
    """The built-in world: training identities rendered afresh every epoch (no fixed image set)."""

    def __init__(self, *, species: Sequence[str] | None = None, identities: int = 400, per_identity: int = 4,
                 render_size: int = 96, seed: int = 0, val_identities: int = 10, val_images: int = 8):
        from fpr.galleries.world import SPECIES, WORLD_VERSION, train_identities

        self.species = tuple(species or SPECIES)
        self.identities, self.per_identity, self.render_size = identities, per_identity, render_size
        self.seed, self.val_identities, self.val_images = seed, val_identities, val_images
        self.version = WORLD_VERSION
        self.items = [(sp, i) for sp in self.species for i in train_identities(sp, identities, seed)]
        self.classes = [f"{sp}/{i}" for sp, i in self.items]
        self.name = "world"

    def dataset(self, preprocess, seed):
        return _WorldEpochs(self.items, self.per_identity, seed, self.render_size, preprocess)

    def validation(self):
        from fpr.galleries.world import render_identity, val_identities

        out = []
        for sp in self.species:
            for ident in val_identities(sp, self.val_identities, 0):
                for k in range(self.val_images):
                    out.append((render_identity(sp, ident, f"val|{k}", size=self.render_size), f"{sp}/{ident}", sp))
        return out

    def describe(self):
        return {"name": "world", "world_version": self.version, "species": list(self.species),
                "identities_per_species": self.identities, "images_per_identity_per_epoch": self.per_identity,
                "render_size": self.render_size, "identity_seed": self.seed, "n_classes": len(self.classes),
                "validation": f"{self.val_identities} held-out identities x {self.val_images} images per species"}

    def fingerprint(self):
        return "sha256:" + hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode()).hexdigest()


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
    def __init__(self, rows: list[tuple[str, int]], seed: int, preprocess: Preprocessing):
        self.rows, self.seed, self.preprocess = rows, seed, preprocess

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: tuple[int, int]):
        from fpr.images import load_rgb

        epoch, i = index
        path, c = self.rows[i]
        rng = np.random.default_rng([self.seed, epoch, i])
        return self.preprocess(_augment(load_rgb(path), rng)), c


class RecordsSource(TrainSource):
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
        h = hashlib.sha256()
        for line in self._hashes:
            h.update(line.encode() + b"\n")
        return "sha256:" + h.hexdigest()


# ----------------------------------------------------------------------------- loss and metrics

class CosineClassifier(nn.Module):
    """Normalised softmax: logits = scale * (cos(theta) - margin on the target class)."""

    def __init__(self, dim: int, n_classes: int, scale: float, margin: float):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_classes, dim) * 0.01)
        self.scale, self.margin = scale, margin

    def forward(self, feats: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        cos = nn.functional.normalize(feats, dim=1) @ nn.functional.normalize(self.weight, dim=1).T
        if self.margin:
            cos = cos - self.margin * nn.functional.one_hot(labels, cos.shape[1]).to(cos.dtype)
        return nn.functional.cross_entropy(self.scale * cos, labels)


def average_precision(scores: np.ndarray, relevant: np.ndarray) -> float:
    order = np.argsort(-scores, kind="stable")
    rel = relevant[order]
    if not rel.any():
        return float("nan")
    hits = np.cumsum(rel)
    return float((hits[rel] / (np.flatnonzero(rel) + 1)).mean())


def oracle_map(vectors: np.ndarray, keys: Sequence[str], groups: Sequence[str]) -> dict[str, float]:
    """Leave-one-out retrieval within each group: every image queries the others; mAP overall and per group."""
    keys, groups = np.asarray(keys), np.asarray(groups)
    sims = vectors @ vectors.T
    aps: dict[str, list[float]] = {}
    for i in range(len(keys)):
        scope = groups == groups[i]
        scope[i] = False
        rel = (keys == keys[i]) & scope
        if rel.any():
            aps.setdefault(str(groups[i]), []).append(average_precision(sims[i, scope], rel[scope]))
    out = {g: float(np.mean(v)) for g, v in sorted(aps.items())}
    out["*"] = float(np.mean([a for v in aps.values() for a in v])) if aps else float("nan")
    return out


@torch.no_grad()
def embed_images(net: nn.Module, images: Sequence[Image.Image], preprocess: Preprocessing, device: torch.device,
                 batch_size: int = 128) -> np.ndarray:
    was_training = net.training
    net.eval()
    out = []
    for s in range(0, len(images), batch_size):
        x = torch.stack([preprocess(im) for im in images[s:s + batch_size]]).to(device)
        out.append(nn.functional.normalize(net(x).float(), dim=1).cpu().numpy())
    net.train(was_training)
    return np.concatenate(out) if out else np.zeros((0, 1), np.float32)


def validate(net: nn.Module, val: list, preprocess: Preprocessing, device: torch.device
             ) -> dict[str, float] | None:
    """Oracle mAP of ``net`` on (image, identity key, group) triples; None without validation images."""
    if not val:
        return None
    images = [v[0] for v in val]
    vecs = embed_images(net, images, preprocess, device)
    return oracle_map(vecs, [v[1] for v in val], [v[2] for v in val])


# ----------------------------------------------------------------------------- training

@dataclass
class TrainResult:
    id: str
    card: dict
    card_path: Path
    weights_path: Path
    val_map: float | None
    seconds: float
    history: list[dict] = field(default_factory=list)

    def as_row(self) -> dict:
        return {"id": self.id, "weights": str(self.weights_path), "card": str(self.card_path),
                "val_map": self.val_map, "seconds": round(self.seconds, 1),
                "epochs": len(self.history)}


class _EpochSampler(torch.utils.data.Sampler):
    """Yields (epoch, i) for a seeded permutation of the epoch's images (``n_take`` of them)."""

    def __init__(self, n: int, n_take: int, seed: int):
        self.n, self.n_take, self.seed, self.epoch = n, n_take, seed, 0

    def __len__(self) -> int:
        return self.n_take

    def __iter__(self):
        perm = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)[:self.n_take]
        return iter([(self.epoch, int(i)) for i in perm])


def _lr_at(step: int, total: int, base: float, warmup: float) -> float:
    w = max(1, int(total * warmup))
    if step < w:
        return base * (step + 1) / w
    t = (step - w) / max(1, total - w)
    return base * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * t)))


def _default_workers() -> int:
    return 1 if (os.cpu_count() or 1) > 1 else 0


def _check_id(encoder_id: str) -> str:
    if not encoder_id or set(encoder_id) - ID_CHARS or encoder_id[0] in "._-":
        raise InputError(f"invalid encoder id '{encoder_id}'",
                         hint="use letters, digits, '.', '_' or '-' (starting with a letter or digit)")
    return encoder_id


def versions() -> dict:
    import PIL
    import safetensors
    import timm

    try:
        from importlib.metadata import version

        fpr_version = version("fpr")
    except Exception:  # pragma: no cover - running from a source tree
        fpr_version = "unknown"
    return {"fpr": fpr_version, "torch": torch.__version__, "timm": timm.__version__, "numpy": np.__version__,
            "pillow": PIL.__version__, "safetensors": safetensors.__version__,
            "python": platform.python_version()}


def _train_loop(net, head, opt, loader, sampler, val, preprocess, device, config: TrainConfig, per_epoch: int,
                total: int, use_amp: bool, start: float) -> list[dict]:
    history: list[dict] = []
    step = 0
    for epoch in range(config.epochs):
        sampler.epoch = epoch
        net.train()
        head.train()
        losses = []
        t0 = time.perf_counter()
        with progress.bar(total=per_epoch, desc=f"epoch {epoch + 1}/{config.epochs}", unit="batch") as bar:
            for b, (x, y) in enumerate(loader):
                if b >= per_epoch:
                    break
                for g in opt.param_groups:
                    g["lr"] = _lr_at(step, total, config.lr, config.warmup)
                x = x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last)
                y = y.to(device, non_blocking=True)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
                    feats = net(x)
                loss = head(feats.float(), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                losses.append(loss.item())
                step += 1
                bar.update(1)
        v = validate(net, val, preprocess, device)
        row = {"epoch": epoch + 1, "loss": float(np.mean(losses)) if losses else float("nan"),
               "val_map": v["*"] if v else None, "val_map_groups": {k: x for k, x in (v or {}).items() if k != "*"},
               "seconds": round(time.perf_counter() - start, 1)}
        history.append(row)
        progress.log(f"epoch {epoch + 1}/{config.epochs}: loss {row['loss']:.3f}"
                     + (f", val mAP {row['val_map']:.3f} (" + ", ".join(f"{k} {x:.3f}" for k, x in
                                                                 row["val_map_groups"].items()) + ")" if v else "")
                     + f", {len(losses) * config.batch_size / max(1e-9, time.perf_counter() - t0):.0f} img/s")
    return history


def train(source: TrainSource, config: TrainConfig, *, encoder_id: str, out: str | Path | None = None,
          flat: bool = False, family: str | None = None, command: str | None = None,
          overwrite: bool = False, description: str | None = None) -> TrainResult:
    """Train, validate every epoch, and write weights + card. Returns where they went."""
    config.check()
    _check_id(encoder_id)
    folder = Path(out).expanduser() if out else weights_dir() / encoder_id
    weights_path = folder / (f"{encoder_id}.safetensors" if flat else WEIGHTS_NAME)
    card_path = folder / (f"{encoder_id}.json" if flat else CARD_NAME)
    if not overwrite and (weights_path.exists() or card_path.exists()):
        from fpr.errors import ConflictError

        raise ConflictError(f"encoder '{encoder_id}' already exists", where=str(folder),
                            hint="choose another --id or pass --overwrite")
    device = pick_device(config.device)
    torch.manual_seed(config.seed)
    np.random.seed(config.seed % (2 ** 32))
    preprocess = config.preprocessing()
    net = build_network(config.arch, config.dim, pretrained=config.pretrained).to(device)
    head = CosineClassifier(config.dim, len(source.classes), config.scale, config.margin).to(device)
    decay, no_decay = [], []
    for p in list(net.parameters()) + list(head.parameters()):
        (decay if p.ndim > 1 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=config.lr)
    val = source.validation()
    workers = _default_workers() if config.workers is None else config.workers
    ds = source.dataset(preprocess, config.seed)
    per_epoch = len(ds) // config.batch_size
    if config.steps_per_epoch:
        per_epoch = min(per_epoch, config.steps_per_epoch)
    if per_epoch < 1:
        raise InputError(f"too few training images ({len(ds)}) for batch size {config.batch_size}",
                         hint="lower --batch-size or add images")
    total = per_epoch * config.epochs
    start = time.perf_counter()
    init = validate(net, val, preprocess, device)
    if init:
        progress.log(f"train {encoder_id}: {len(source.classes)} identities, {len(ds)} images/epoch, "
                     f"{len(val)} validation images; untrained val mAP {init['*']:.3f}")
    use_amp = device.type == "cuda"
    n_threads = torch.get_num_threads()
    if device.type == "cpu":
        # Leave a core to each rendering/decoding worker: oversubscribed OpenMP threads spin and stall.
        torch.set_num_threads(config.threads or max(1, min(n_threads, (os.cpu_count() or 1) - workers)))
    net = net.to(memory_format=torch.channels_last)
    sampler = _EpochSampler(len(ds), per_epoch * config.batch_size, config.seed)
    # One loader with persistent workers for all epochs: the workers keep their caches
    # (e.g. rendered markings) while the sampler hands out (epoch, index) pairs.
    loader = torch.utils.data.DataLoader(ds, batch_size=config.batch_size, sampler=sampler, drop_last=True,
                                         num_workers=workers, pin_memory=device.type == "cuda",
                                         prefetch_factor=4 if workers else None, persistent_workers=bool(workers))
    try:
        history = _train_loop(net, head, opt, loader, sampler, val, preprocess, device, config, per_epoch, total,
                              use_amp, start)
    finally:
        torch.set_num_threads(n_threads)
        del loader  # stops persistent workers
    seconds = time.perf_counter() - start
    final = history[-1] if history else {}
    card = {
        "format": CARD_FORMAT,
        "id": encoder_id,
        "family": family or ("builtin-cnn" if config.arch.startswith("fpr-cnn") else "timm"),
        "architecture": config.arch,
        "dim": config.dim,
        "preprocessing": asdict(preprocess),
        "description": description or "",
        "training_data": {**source.describe(), "fingerprint": source.fingerprint()},
        "seed": config.seed,
        "training": {k: v for k, v in asdict(config).items() if k not in ("device", "workers", "threads", "mean", "std")},
        "loss": {"kind": "normalised-softmax" if not config.margin else "cosine-margin-softmax",
                 "scale": config.scale, "margin": config.margin},
        "metrics": {"val_map": final.get("val_map"), "val_map_groups": final.get("val_map_groups", {}),
                    "untrained_val_map": init["*"] if init else None, "history": history,
                    "validation": "oracle mAP: each held-out image queries the others of its group"},
        "train_seconds": round(seconds, 1),
        "device": str(device),
        "command": command or "",
        "versions": versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_outputs(net, card, folder, weights_path, card_path)
    progress.log(f"wrote {weights_path} and {card_path.name} ({seconds:.0f} s)")
    return TrainResult(encoder_id, card, card_path, weights_path, final.get("val_map"), seconds, history)


def _write_outputs(net: nn.Module, card: dict, folder: Path, weights_path: Path, card_path: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    tmp_w = weights_path.with_name(weights_path.name + ".tmp")
    # One metadata key: safetensors writes a multi-key metadata map in a random order, and the
    # file's bytes (its checksum, part of every cache key) must be the same for the same weights.
    save_file(state, str(tmp_w), metadata={"fpr_encoder": f"{card['id']} {card['architecture']}"})
    tmp_c = card_path.with_name(card_path.name + ".tmp")
    tmp_c.write_text(json.dumps(card, indent=2, sort_keys=False) + "\n")
    for tmp in (tmp_w, tmp_c):
        os.chmod(tmp, 0o644)  # safetensors creates owner-only files; weights are meant to be shared
    tmp_w.replace(weights_path)  # weights first: a card never points at missing weights
    tmp_c.replace(card_path)


def command_line() -> str:
    argv = [Path(sys.argv[0]).name] + sys.argv[1:] if sys.argv else []
    return " ".join(argv)
