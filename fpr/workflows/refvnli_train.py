"""``fpr refvnli train``: a RefVNLI-recipe model (:mod:`fpr.scorers.refvnli.model`) from ``fpr refvnli data`` triplets.

Every triplet is one pass of the network, two binary cross-entropy terms (textual
alignment and subject preservation, the paper's two labels) plus ``clip_weight`` x the
pairwise sigmoid loss of the dual-encoder read-out on the TA label. The frozen identity
encoder's vectors are computed once per image; scene pixels are kept in memory. Each
epoch draws a seeded permutation (``numpy`` generator keyed by seed and epoch), so the
same data, settings and seed give the same weights on the same machine and thread count.

``full_reference`` (default 0.5) is a declared departure from the paper: fpr's queries
carry whole reference images, not subject crops, so that share of the triplets (drawn
per triplet and epoch) show the reference's whole frame instead of its crop.

With ``val_data`` (another ``fpr refvnli data`` folder, e.g. another seed) every epoch
logs the SP and TA AUROC there; the last epoch's go into the card.
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from fpr import progress
from fpr.cards import Field, finite
from fpr.errors import ConflictError, InputError, NotFoundError
from fpr.keys import utc_now
from fpr.metrics.separation import auroc
from fpr.scorers.refvnli import model as rm
from fpr.workflows.refvnli import DATA_CARD, DATA_FORMAT



@dataclass
class TrainSettings:
    epochs: int = 25
    batch_size: int = 240  # triplets per step (whole components: a world set is 60)
    lr: float = 2e-3
    weight_decay: float = 1e-4
    clip_weight: float = 1.0  # weight of the dual-encoder (CLIP-T analogue) loss
    full_reference: float = 0.5  # share of triplets whose reference is the whole frame, not the crop
    seed: int = 0
    device: str = "auto"
    threads: int | None = None  # PyTorch CPU threads (None: PyTorch's default)

    def check(self) -> None:
        if self.epochs < 1 or self.batch_size < 2:
            raise InputError(f"epochs must be >= 1 and batch size >= 2, got {self.epochs} and {self.batch_size}")
        finite(self.lr, name="lr", low=0.0, low_open=True)
        finite(self.weight_decay, name="weight decay", low=0.0)
        finite(self.clip_weight, name="clip weight", low=0.0)
        finite(self.full_reference, name="full-reference share", low=0.0, high=1.0)


@dataclass
class TripletData:
    """A data folder in memory: per unique image its identity vector and scene pixels; per triplet indices."""

    folder: Path
    card: dict
    table: pd.DataFrame
    ident: torch.Tensor  # (images, identity_dim)
    pixels: torch.Tensor  # (images, 3, size, size)
    ref: np.ndarray  # image index of each triplet's reference crop
    ref_full: np.ndarray  # image index of the reference's whole frame
    tgt: np.ndarray
    labels: torch.Tensor  # (triplets, 2) in rm.ORDER
    token_ids: list[list[int]]


DATA_FIELDS = (Field("format", str), Field("manifest", str), Field("fingerprint", str, required=False))
TRIPLET_COLUMNS = ("reference_path", "target_path", "prompt", "sp", "ta", "reference_frame")


@dataclass
class TripletFiles:
    """A ``fpr refvnli data`` folder checked at the door: its card, triplets (labels 0/1) and every image path
    resolved inside the folder (``frame``: each triplet's reference as a whole frame)."""

    folder: Path
    card: dict
    table: pd.DataFrame
    paths: dict[str, Path]  # path as the table names it -> the file inside the folder
    frame: list[str]  # per triplet: frames/<its reference crop's name>


def read_triplets(folder: str | Path) -> TripletFiles:
    """Card, triplet table and image paths of a data folder; anything damaged is one line naming file and field."""
    from fpr.cards import binary_labels, confined, read_card
    from fpr.tables import read_table

    folder = Path(folder).expanduser()
    card_path = folder / DATA_CARD
    if not card_path.is_file():
        raise NotFoundError(f"no RefVNLI data at {folder} (no {DATA_CARD})",
                            hint="build it with `fpr refvnli data --out FOLDER`")
    card = read_card(card_path, what="RefVNLI data card", fields=DATA_FIELDS,
                     hint="rebuild the folder with `fpr refvnli data`")
    if card["format"] != DATA_FORMAT:
        raise InputError(f"RefVNLI data card format {card['format'][:40]!r} is not {DATA_FORMAT}", where=str(card_path))
    manifest = confined(folder, card["manifest"], name="manifest", where=str(card_path))
    table = read_table(manifest, required=TRIPLET_COLUMNS, what="refvnli triplets")
    for col in rm.ORDER:
        table[col] = binary_labels(table[col], name=col, where=str(manifest))
    frame = ["frames/" + Path(p).name for p in table["reference_path"]]  # crops/X.png -> frames/X.png
    paths: dict[str, Path] = {}
    for col, values in (("reference_path", table["reference_path"]), ("target_path", table["target_path"]),
                        ("reference_path", frame)):
        for v in values:
            if v not in paths:
                paths[v] = confined(folder, v, name=col, where=str(manifest))
    return TripletFiles(folder, card, table, paths, frame)


def read_data(folder: str | Path, encoder, cfg: rm.NetConfig) -> TripletData:
    """Read a ``fpr refvnli data`` folder; every image embedded once by the frozen encoder."""
    from fpr.images import load_rgb

    files = read_triplets(folder)
    table = files.table
    paths = sorted(files.paths)
    index = {p: i for i, p in enumerate(paths)}
    images = []
    for p in progress.bar(paths, desc="reading triplet images", unit="img"):
        if not files.paths[p].is_file():
            raise NotFoundError(f"triplet image {p} is missing", where=str(files.folder),
                                hint="rebuild the data folder")
        images.append(load_rgb(files.paths[p]))  # the one image reader: bomb limit, one line for a bad file
    ident = rm.identity_vectors(encoder, images)
    pixels = torch.stack([rm.scene_pixels(im, cfg.size) for im in images])
    labels = torch.tensor(table[list(rm.ORDER)].to_numpy(dtype=np.int64), dtype=torch.float32)
    return TripletData(files.folder, files.card, table, ident, pixels, table["reference_path"].map(index).to_numpy(),
                       np.array([index[p] for p in files.frame]), table["target_path"].map(index).to_numpy(), labels,
                       [rm.token_ids(p, cfg.buckets) for p in table["prompt"]])


def components(data: TripletData) -> list[np.ndarray]:
    """Triplet rows grouped by connected images (a reference, its targets, its frame): in the world, one set.

    A batch is whole components, so the scene tower runs once per image of the batch instead of twice per
    triplet (a world set: 12 images, 60 triplets) -- the difference between minutes and an hour on a loaded CPU.
    """
    parent = list(range(len(data.pixels)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b, c in zip(data.ref, data.ref_full, data.tgt):
        for x in (b, c):
            ra, rx = root(int(a)), root(int(x))
            if ra != rx:
                parent[max(ra, rx)] = min(ra, rx)
    roots = np.array([root(int(a)) for a in data.ref])
    return [np.flatnonzero(roots == r) for r in np.unique(roots)]


def _batches(groups: list[np.ndarray], batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled groups packed into batches of at least ``batch_size`` triplets (the last may be smaller)."""
    out, cur, n = [], [], 0
    for g in rng.permutation(len(groups)):
        cur.append(groups[g])
        n += len(groups[g])
        if n >= batch_size:
            out.append(np.concatenate(cur))
            cur, n = [], 0
    if cur:
        out.append(np.concatenate(cur))
    return out


def _forward(net: rm.RefvnliNet, data: TripletData, rows: np.ndarray, use_full: np.ndarray,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The network on triplets ``rows``; the scene tower sees each distinct image of the batch once."""
    ref = np.where(use_full, data.ref_full[rows], data.ref[rows])
    tgt = data.tgt[rows]
    seen = np.concatenate([ref, tgt]) if net.cfg.reference_scene else tgt
    images, pos = np.unique(seen, return_inverse=True)
    scenes = net.scene(data.pixels[images].to(device))
    pos = torch.from_numpy(pos).to(device)
    s_ref = scenes[pos[:len(rows)]] if net.cfg.reference_scene else None
    ids = [data.token_ids[r] for r in rows]
    offsets = torch.tensor(np.cumsum([0] + [len(i) for i in ids[:-1]]), dtype=torch.long, device=device)
    flat = torch.tensor([t for i in ids for t in i], dtype=torch.long, device=device)
    return net.fuse(data.ident[ref].to(device), data.ident[tgt].to(device), s_ref, scenes[pos[-len(rows):]], flat,
                    offsets)


@torch.no_grad()
def predict(net: rm.RefvnliNet, data: TripletData, device: torch.device, *, full_reference: bool = False,
            batch_size: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities (triplets, 2) in rm.ORDER, dual-encoder cosines) of every triplet."""
    was = net.training
    net.eval()
    probs, cos = [], []
    for s in range(0, len(data.ref), batch_size):
        rows = np.arange(s, min(s + batch_size, len(data.ref)))
        logits, c = _forward(net, data, rows, np.full(len(rows), full_reference), device)
        probs.append(torch.sigmoid(logits).cpu().numpy())
        cos.append(c.cpu().numpy())
    net.train(was)
    return np.concatenate(probs), np.concatenate(cos)


def separations(net: rm.RefvnliNet, data: TripletData, device: torch.device) -> dict[str, float]:
    """AUROC of SP over sp labels, of TA and of the dual-encoder cosine over ta labels, on every triplet."""
    probs, cos = predict(net, data, device)
    labels = data.labels.numpy()
    out = {}
    for name, score, col in (("sp", probs[:, 1], 1), ("ta", probs[:, 0], 0), ("clip_t", cos, 0)):
        out[f"{name}_auroc"] = auroc(score[labels[:, col] == 1], score[labels[:, col] == 0])
    return out


def _machine(device: torch.device, threads: int) -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "torch_threads": threads, "device": str(device),
            "load_average_1_5_15_at_start": [round(x, 2) for x in load]}


@dataclass
class TrainedRefvnli:
    out: Path
    card: dict
    seconds: float
    history: list[dict] = field(default_factory=list)

    def as_row(self) -> dict:
        last = self.history[-1] if self.history else {}
        return {"out": str(self.out), "seconds": round(self.seconds, 1), "epochs": len(self.history),
                "loss": round(last.get("loss", float("nan")), 4),
                **{k: round(v, 4) for k, v in last.items() if k.endswith("_auroc")}}


def train_refvnli(data: str | Path, out: str | Path, *, settings: TrainSettings | None = None,
                  net_config: rm.NetConfig | None = None, val_data: str | Path | None = None, model_id: str = "",
                  command: str = "", overwrite: bool = False) -> TrainedRefvnli:
    """Train on the triplets in ``data``; write ``model.safetensors`` + ``fpr-refvnli.json`` into ``out``."""
    from fpr.encoders.registry import pick_device
    from fpr.encoders.train import versions
    from fpr.scorers.encoding import cached_encoder

    began = time.perf_counter()
    settings = settings or TrainSettings()
    settings.check()
    cfg = net_config or rm.NetConfig()
    cfg.check()
    out = Path(out).expanduser()
    if (out / rm.CARD_NAME).exists() and not overwrite:
        raise ConflictError("a RefVNLI model already exists there", where=str(out),
                            hint="choose another --out or pass --overwrite")
    device = pick_device(settings.device)
    threads_before = torch.get_num_threads()
    if settings.threads:
        torch.set_num_threads(settings.threads)
    machine = _machine(device, torch.get_num_threads())
    try:
        encoder = cached_encoder(cfg.identity_encoder, str(device))
        cfg = replace(cfg, identity_dim=encoder.spec.dim)  # the head reads whatever the encoder gives
        train_set = read_data(data, encoder, cfg)
        val_set = read_data(val_data, encoder, cfg) if val_data else None
        torch.manual_seed(settings.seed)
        net = rm.RefvnliNet(cfg).to(device)
        history, fit_seconds = _fit(net, train_set, val_set, settings, device)
    finally:
        torch.set_num_threads(threads_before)
    load_end = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    machine["load_average_1_5_15_at_end"] = [round(x, 2) for x in load_end]
    card = {
        "format": rm.CARD_FORMAT, "id": model_id or out.name, "architecture": rm.ARCHITECTURE,
        "description": "a RefVNLI-recipe model trained by fpr (not the authors' PaliGemma checkpoint)",
        "outputs": list(rm.ORDER), "net": asdict(cfg),
        "identity_encoder": {"id": cfg.identity_encoder, "weights_checksum": encoder.weights.checksum,
                             "frozen": True},
        "training": {k: v for k, v in asdict(settings).items() if k not in ("device", "threads")},
        "loss": "BCE(ta) + BCE(sp) + clip_weight * sigmoid-pair loss of the dual-encoder cosine on ta",
        "data": {"path": str(Path(data).expanduser().resolve()), "fingerprint": train_set.card.get("fingerprint"),
                 "source": train_set.card.get("source"), "triplets": len(train_set.ref),
                 "counts": train_set.card.get("counts")},
        "validation_data": None if val_set is None else {
            "path": str(Path(val_data).expanduser().resolve()), "fingerprint": val_set.card.get("fingerprint"),
            "source": val_set.card.get("source"), "triplets": len(val_set.ref)},
        # train_seconds: the whole command's work (reading, embedding, fitting); fit_seconds: the epochs only
        "history": history, "train_seconds": round(time.perf_counter() - began, 1),
        "fit_seconds": round(fit_seconds, 1), "machine": machine, "command": command,
        "versions": versions(), "created": utc_now(),
    }
    rm.save_model(net, card, out)
    progress.log(f"wrote {out / rm.WEIGHTS_NAME} and {rm.CARD_NAME} ({card['train_seconds']:.0f} s)")
    return TrainedRefvnli(out, card, card["train_seconds"], history)


def _fit(net: rm.RefvnliNet, data: TripletData, val: TripletData | None, settings: TrainSettings,
         device: torch.device) -> tuple[list[dict], float]:
    decay = [p for p in net.parameters() if p.ndim > 1]
    rest = [p for p in net.parameters() if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": settings.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=settings.lr)
    groups = components(data)
    n = len(data.ref)
    steps = len(_batches(groups, settings.batch_size, np.random.default_rng(0)))
    total = steps * settings.epochs
    bce = nn.functional.binary_cross_entropy_with_logits
    history, start, step = [], time.perf_counter(), 0
    for epoch in range(settings.epochs):
        rng = np.random.default_rng([settings.seed, epoch])
        use_full = rng.random(n) < settings.full_reference
        net.train()
        losses = []
        for rows in _batches(groups, settings.batch_size, rng):
            # cosine decay to 5% of the base rate: a short schedule without a tuning knob
            for g in opt.param_groups:
                g["lr"] = settings.lr * (0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * min(step, total) / total)))
            y = data.labels[rows].to(device)
            logits, cos = _forward(net, data, rows, use_full[rows], device)
            loss = bce(logits, y) + settings.clip_weight * bce(net.clip_scale * cos + net.clip_bias, y[:, 0])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            step += 1
        row = {"epoch": epoch + 1, "loss": float(np.mean(losses)), "seconds": round(time.perf_counter() - start, 1)}
        if val is not None:
            row.update(separations(net, val, device))
        history.append(row)
        progress.log(f"epoch {epoch + 1}/{settings.epochs}: loss {row['loss']:.4f}"
                     + "".join(f", {k} {v:.3f}" for k, v in row.items() if k.endswith("_auroc"))
                     + f" ({row['seconds']:.0f} s)")
    return history, time.perf_counter() - start


__all__ = ["TrainSettings", "TrainedRefvnli", "TripletData", "TripletFiles", "predict", "read_data", "read_triplets", "separations",
           "train_refvnli"]
