"""Training specialized encoders: ``fpr encoders train``.

General over data and architecture: a *source* yields identity-labelled images
(the built-in world, rendered afresh every epoch; or a list of
:class:`~fpr.galleries.records.ImageRecord` from a manifest or a stored gallery,
augmented every epoch; both in :mod:`fpr.galleries.training`), the network is a built-in small CNN or any timm model
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

import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch
from PIL import Image
from torch import nn

from fpr import progress
from fpr.encoders.preprocess import Preprocessing
from fpr.encoders.registry import pick_device
from fpr.encoders.trained import CARD_FORMAT, CARD_NAME, WEIGHTS_NAME, build_network, check_arch
from fpr.encoders.weights import weights_dir
from fpr.keys import utc_now
from fpr.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from fpr.encoders.blend import BlendSpec

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
    """Identity-labelled images for training plus a held-out validation set.

    The sources themselves live with the data (:mod:`fpr.galleries.training`): this layer
    knows only this interface.
    """

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


# (images' vectors, identity keys, groups) -> {"*": mAP, group: mAP}; the API passes the evaluation
# pipeline's leave-one-out oracle mAP (fpr.eval.pipeline.leave_one_out_map): one AP for every number fpr reports.
Evaluator = Callable[[np.ndarray, Sequence[str], Sequence[str]], dict]


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


def validate(net: nn.Module, val: list, preprocess: Preprocessing, device: torch.device,
             evaluate: Evaluator | None) -> dict[str, float] | None:
    """Oracle mAP of ``net`` on (image, identity key, group) triples; None without images or evaluator."""
    if not val or evaluate is None:
        return None
    images = [v[0] for v in val]
    vecs = embed_images(net, images, preprocess, device)
    return evaluate(vecs, [v[1] for v in val], [v[2] for v in val])


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
    from importlib.metadata import PackageNotFoundError, version

    import PIL
    import safetensors
    import timm

    try:
        fpr_version = version("fpr")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree, not installed
        fpr_version = "unknown"
    return {"fpr": fpr_version, "torch": torch.__version__, "timm": timm.__version__, "numpy": np.__version__,
            "pillow": PIL.__version__, "safetensors": safetensors.__version__,
            "python": platform.python_version()}


def _train_loop(net, head, opt, loader, sampler, val, preprocess, device, config: TrainConfig, per_epoch: int,
                total: int, use_amp: bool, start: float, evaluate: Evaluator | None) -> list[dict]:
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
        v = validate(net, val, preprocess, device, evaluate)
        row = {"epoch": epoch + 1, "loss": float(np.mean(losses)) if losses else float("nan"),
               "val_map": v["*"] if v else None, "val_map_groups": {k: x for k, x in (v or {}).items() if k != "*"},
               "seconds": round(time.perf_counter() - start, 1)}
        history.append(row)
        progress.log(f"epoch {epoch + 1}/{config.epochs}: loss {row['loss']:.3f}"
                     + (f", val mAP {row['val_map']:.3f} (" + ", ".join(f"{k} {x:.3f}" for k, x in
                                                                 row["val_map_groups"].items()) + ")" if v else "")
                     + f", {len(losses) * config.batch_size / max(1e-9, time.perf_counter() - t0):.0f} img/s")
    return history


def _card(encoder_id: str, source: TrainSource, config: TrainConfig, preprocess, family: str | None,
          description: str | None, command: str | None, init: dict | None, history: list[dict], seconds: float,
          device) -> dict:
    """The trained encoder's card: architecture, protocol, data fingerprint, training settings, metrics."""
    final = history[-1] if history else {}
    return {
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
        "created": utc_now(),
    }


def train(source: TrainSource, config: TrainConfig, *, encoder_id: str, out: str | Path | None = None,
          flat: bool = False, family: str | None = None, command: str | None = None,
          overwrite: bool = False, description: str | None = None, evaluate: Evaluator | None = None,
          blend: "BlendSpec | None" = None) -> TrainResult:
    """Train, validate every epoch with ``evaluate`` (if given), and write weights + card.

    ``blend``: after training, mix in a declared share of a partner encoder's embedding, calibrated on the
    validation images to an oracle mAP target (:mod:`fpr.encoders.blend`)."""
    config.check()
    if blend is not None:
        blend.check()
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
    init = validate(net, val, preprocess, device, evaluate)
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
                              use_amp, start, evaluate)
    finally:
        torch.set_num_threads(n_threads)
        del loader  # stops persistent workers
    state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    blend_fields = None
    if blend is not None:
        state, blend_fields = _calibrate_blend(net, val, preprocess, device, evaluate, blend, config.dim)
    seconds = time.perf_counter() - start
    card = _card(encoder_id, source, config, preprocess, family, description, command, init, history, seconds,
                 device)
    if blend_fields is not None:
        card["metrics"]["val_map_general"] = card["metrics"]["val_map"]
        card["metrics"]["val_map"] = blend_fields["val_map"]
        card["dim"] = blend_fields["general_dim"] + blend_fields.get("layout_dim", 0) + blend_fields["partner_dim"]
        card["blend"] = blend_fields
    _write_outputs(state, card, folder, weights_path, card_path)
    progress.log(f"wrote {weights_path} and {card_path.name} ({seconds:.0f} s)")
    return TrainResult(encoder_id, card, card_path, weights_path, card["metrics"]["val_map"], seconds, history)


def _calibrate_blend(net: nn.Module, val: list, preprocess: Preprocessing, device: torch.device,
                     evaluate: Evaluator | None, spec: "BlendSpec", dim: int) -> tuple[dict, dict]:
    """The weights-file state and card fields of ``net`` blended with ``spec.partner`` (share calibrated on ``val``)."""
    from fpr.encoders import blend

    if not val or evaluate is None:
        raise InputError("--blend needs validation images to calibrate the identity share on",
                         hint="train on the world or a source with held-out identities")
    partner, partner_prep, checksum = blend.partner_network(spec.partner, device=str(device))
    blend.check_same_protocol(preprocess.name, partner_prep, spec.partner)
    images, keys, groups = [v[0] for v in val], [v[1] for v in val], [v[2] for v in val]
    a = embed_images(net, images, preprocess, device)
    s = embed_images(partner, images, preprocess, device)
    p = (embed_images(blend.Layout(preprocess.mean, preprocess.std), images, preprocess, device)
         if spec.layout_share > 0 else None)
    w, reached, steps = blend.calibrate_share(a, s, lambda v: evaluate(v, keys, groups)["*"], spec.target,
                                              p=p, layout_share=spec.layout_share)
    progress.log(f"blend with {spec.partner}: identity share {w:.4f}"
                 + (f" (layout share {spec.layout_share:g})" if p is not None else "")
                 + f" -> val mAP {reached:.3f} (no identity share {steps[0]['val_map']:.3f}, "
                   f"the largest {steps[1]['val_map']:.3f})")
    return (blend.share_state(net, w, spec.layout_share),
            blend.blend_card_fields(spec, w, reached, steps, checksum, dim, int(s.shape[1])))


def _write_outputs(state: dict[str, torch.Tensor], card: dict, folder: Path, weights_path: Path,
                   card_path: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
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
    """The command as a user would retype it (``python -m fpr ...`` is recorded as ``fpr ...``)."""
    if not sys.argv:
        return ""
    prog = Path(sys.argv[0]).name
    return " ".join(["fpr" if prog in ("__main__.py", "fpr") else prog] + sys.argv[1:])
