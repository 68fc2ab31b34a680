"""A small RefVNLI-recipe model: one pass over (reference, prompt, target) gives textual alignment and subject preservation.

RefVNLI (Slobodkin et al., 2025) fine-tunes PaliGemma on labelled triplets to output
two digits, textual alignment (TA) then subject preservation (SP). This module is the
same recipe at a size that trains on two CPU cores in minutes -- *not* the authors'
model:

- **identity tower**: a frozen fpr image encoder (by default ``fpr-world-v3``, the
  built-in world's identity encoder); its L2-normalised embeddings of reference and
  target. Frozen because identity is what that encoder was trained for; the head
  only learns how to read it (``card["identity_encoder"]`` records the weights'
  checksum, and loading refuses other weights).
- **scene tower**: a small CNN (``NetConfig.widths``, flattened 4x4 map, so left/right
  facing survives), trained from scratch: the identity encoder is by design blind to
  pose, light and background, which is what a prompt describes. It reads the target;
  the reference too only in the variant ``reference_scene=True`` (one tower shared by
  both), which the validation showed to learn scene matching as identity.
- **text tower**: hashed unigrams and bigrams of the prompt (``zlib.crc32``, stable
  across processes) in an ``EmbeddingBag`` -- the world's prompt vocabulary is tiny.
- **fused head**: an MLP over identity agreement (product, absolute difference,
  cosine), the target's scene vector (and the reference's in the variant), the text
  vector and its product with the target's scene vector -> two logits,
  ``ORDER = ("ta", "sp")`` as the paper's two digits.
- **dual-encoder read-out** (:meth:`RefvnliNet.clip_t`): the cosine between the
  target's scene vector and the text vector through two linear projections, trained
  with a pairwise sigmoid loss on the same TA labels. It is the honest same-backbone
  analogue of CLIP-T (late fusion, no joint head) that the validation compares to.

A checkpoint is a folder: ``model.safetensors`` (the head, scene and text towers;
never the frozen encoder) and ``fpr-refvnli.json`` (the card: :data:`CARD_FORMAT`,
the :class:`NetConfig`, the identity encoder and its checksum, training settings,
data provenance, command, time, machine, metrics).
"""
from __future__ import annotations

import json
import re
import zlib
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn

from fpr.errors import InputError, NotFoundError

CARD_NAME = "fpr-refvnli.json"
WEIGHTS_NAME = "model.safetensors"
CARD_FORMAT = "fpr-refvnli-model/1"
ARCHITECTURE = "fpr-refvnli-fused"
BUILTIN_ID = "fpr-refvnli-world-v1"
ORDER = ("ta", "sp")  # the paper's two outputs, in its order
_WORD = re.compile(r"<u>|</u>|\[v\]|[a-z0-9]+")


def builtin_dir() -> Path:
    """The folder of the model shipped inside the package."""
    return Path(__file__).resolve().parent / "weights" / BUILTIN_ID


@dataclass(frozen=True)
class NetConfig:
    identity_encoder: str = "fpr-world-v3"
    identity_dim: int = 128
    size: int = 32  # scene tower input side (squashed): pose, light, setting are coarse
    widths: tuple[int, ...] = (16, 32, 64)  # each stage halves the side: 32 -> 4
    dim: int = 64  # scene and text vectors
    buckets: int = 2048  # hashed n-gram table
    hidden: int = 128
    # The reference's scene vector as a head input. Off: the paper's positives are two frames of one
    # scene and its negatives another scene, so a head that sees both scenes learns "same background,
    # same subject" -- and rates a layout copy with drift above the subject in a new scene.
    reference_scene: bool = False

    @classmethod
    def from_dict(cls, d: dict) -> "NetConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise InputError(f"unknown RefVNLI network settings {unknown}", hint="the card was written by a newer fpr")
        return cls(**{k: tuple(v) if k == "widths" else v for k, v in d.items()})

    def check(self) -> None:
        if self.size != 4 * 2 ** len(self.widths):
            raise InputError(f"scene input side {self.size} with {len(self.widths)} stages does not end at 4x4",
                             hint="use size = 4 * 2**stages (32 for 3 stages)")
        if self.dim < 1 or self.buckets < 2 or self.hidden < 1:
            raise InputError("dim, buckets and hidden must be positive (buckets >= 2)")


# --------------------------------------------------------------------------- text

def ngrams(prompt: str) -> list[str]:
    """Lower-cased words (the ``<u>``/``</u>`` markup and ``[V]`` kept as words), then adjacent bigrams."""
    words = _WORD.findall(prompt.lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


def token_ids(prompt: str, buckets: int) -> list[int]:
    """Bucket of every n-gram: CRC-32 (the same in every process, unlike ``hash``) modulo ``buckets``."""
    grams = ngrams(prompt)
    if not grams:
        raise InputError("a RefVNLI prompt has no words", where=repr(prompt[:80]))
    return [zlib.crc32(g.encode()) % buckets for g in grams]


def text_batch(prompts: list[str], buckets: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat ids, offsets) for ``nn.EmbeddingBag``."""
    ids = [token_ids(p, buckets) for p in prompts]
    offsets = np.cumsum([0] + [len(i) for i in ids[:-1]])
    return torch.tensor([t for i in ids for t in i], dtype=torch.long), torch.tensor(offsets, dtype=torch.long)


# --------------------------------------------------------------------------- images

def scene_pixels(image: Image.Image, size: int) -> torch.Tensor:
    """(3, size, size) float in [-1, 1]: the image squashed to a square (bilinear)."""
    arr = np.asarray(image.convert("RGB").resize((size, size), Image.BILINEAR), np.float32)
    return torch.from_numpy(arr).permute(2, 0, 1) / 127.5 - 1.0


def identity_vectors(encoder, images: list[Image.Image], batch_size: int = 64) -> torch.Tensor:
    """(n, identity_dim) L2-normalised embeddings by the frozen identity encoder."""
    out = []
    for s in range(0, len(images), batch_size):
        x = torch.stack([encoder.preprocessing(im) for im in images[s:s + batch_size]])
        out.append(torch.from_numpy(encoder.embed_batch(x)))
    return torch.cat(out) if out else torch.zeros((0, encoder.spec.dim))


# --------------------------------------------------------------------------- network

def _stage(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class RefvnliNet(nn.Module):
    """The trainable part: scene tower, text tower, fused head, dual-encoder projections."""

    def __init__(self, cfg: NetConfig):
        super().__init__()
        cfg.check()
        self.cfg = cfg
        stages, cin = [], 3
        for w in cfg.widths:
            stages.append(_stage(cin, w))
            cin = w
        self.scene = nn.Sequential(*stages, nn.Flatten(), nn.Linear(cin * 16, cfg.dim), nn.ReLU(inplace=True))
        self.text = nn.EmbeddingBag(cfg.buckets, cfg.dim, mode="mean")
        self.text_out = nn.Sequential(nn.Linear(cfg.dim, cfg.dim), nn.ReLU(inplace=True))
        fused = 2 * cfg.identity_dim + 1 + (4 if cfg.reference_scene else 3) * cfg.dim
        self.head = nn.Sequential(nn.Linear(fused, cfg.hidden), nn.ReLU(inplace=True), nn.Linear(cfg.hidden, 2))
        self.img_proj = nn.Linear(cfg.dim, cfg.dim)
        self.txt_proj = nn.Linear(cfg.dim, cfg.dim)
        self.clip_scale = nn.Parameter(torch.tensor(10.0))  # pairwise sigmoid: scale * cos + bias
        self.clip_bias = nn.Parameter(torch.tensor(-5.0))

    def fuse(self, id_ref: torch.Tensor, id_tgt: torch.Tensor, s_ref: torch.Tensor | None, s_tgt: torch.Tensor,
             ids: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits (B, 2) in :data:`ORDER`, dual-encoder cosine (B,)) from the towers' outputs."""
        t = self.text_out(self.text(ids, offsets))
        agree = id_ref * id_tgt
        parts = [agree, (id_ref - id_tgt).abs(), agree.sum(1, keepdim=True)]
        parts += ([s_ref] if self.cfg.reference_scene else []) + [s_tgt, t, s_tgt * t]
        fused = torch.cat(parts, 1)
        return self.head(fused), self.cosine(s_tgt, t)

    def forward(self, id_ref: torch.Tensor, id_tgt: torch.Tensor, x_ref: torch.Tensor, x_tgt: torch.Tensor,
                ids: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One pass per triplet: (logits (B, 2) in :data:`ORDER`, dual-encoder cosine (B,))."""
        if not self.cfg.reference_scene:
            return self.fuse(id_ref, id_tgt, None, self.scene(x_tgt), ids, offsets)
        scenes = self.scene(torch.cat([x_ref, x_tgt]))  # one tower, both images
        return self.fuse(id_ref, id_tgt, scenes[:len(x_ref)], scenes[len(x_ref):], ids, offsets)

    def cosine(self, s_tgt: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a = nn.functional.normalize(self.img_proj(s_tgt), dim=1)
        b = nn.functional.normalize(self.txt_proj(t), dim=1)
        return (a * b).sum(1)


# --------------------------------------------------------------------------- checkpoints

@dataclass
class LoadedModel:
    net: RefvnliNet
    encoder: object  # fpr.encoders.registry.Encoder (frozen identity tower)
    card: dict
    folder: Path
    device: torch.device

    def inputs(self, references: list[Image.Image], targets: list[Image.Image], prompts: list[str]) -> tuple:
        size = self.net.cfg.size
        ids, offsets = text_batch(prompts, self.net.cfg.buckets)
        tensors = (identity_vectors(self.encoder, references), identity_vectors(self.encoder, targets),
                   torch.stack([scene_pixels(im, size) for im in references]),
                   torch.stack([scene_pixels(im, size) for im in targets]), ids, offsets)
        return tuple(t.to(self.device) for t in tensors)

    @torch.inference_mode()
    def score(self, references: list[Image.Image], targets: list[Image.Image], prompts: list[str]
              ) -> tuple[np.ndarray, np.ndarray]:
        """(probabilities (n, 2) in :data:`ORDER`, dual-encoder cosines (n,)) for n triplets."""
        if not (len(references) == len(targets) == len(prompts)):
            raise InputError("references, targets and prompts differ in length")
        if not prompts:
            return np.zeros((0, 2)), np.zeros(0)
        logits, cos = self.net(*self.inputs(references, targets, prompts))
        return torch.sigmoid(logits.float()).cpu().numpy(), cos.float().cpu().numpy()


def read_card(folder: Path) -> dict:
    from fpr.cards import Field
    from fpr.cards import read_card as read_json_card

    card_path = folder / CARD_NAME
    card = read_json_card(card_path, what="RefVNLI model card", hint="retrain with `fpr refvnli train`", fields=(
        Field("format", str), Field("architecture", str), Field("net", dict), Field("identity_encoder", dict)))
    if card.get("format") != CARD_FORMAT or card.get("architecture") != ARCHITECTURE:
        raise InputError(f"RefVNLI model card format {card.get('format')!r} / architecture "
                         f"{card.get('architecture')!r} is not {CARD_FORMAT} / {ARCHITECTURE}", where=str(card_path))
    return card


def is_checkpoint(folder: Path) -> bool:
    return (folder / CARD_NAME).is_file()


def load_model(folder: str | Path, device: str = "auto") -> LoadedModel:
    """A checkpoint folder written by ``fpr refvnli train`` (strict key match, identity-encoder checksum checked)."""
    from safetensors.torch import load_file

    from fpr.encoders.registry import pick_device
    from fpr.scorers.encoding import cached_encoder

    folder = Path(folder).expanduser()
    if not is_checkpoint(folder):
        raise NotFoundError(f"no RefVNLI model at {folder} (no {CARD_NAME})",
                            hint="train one with `fpr refvnli train --data DATA --out FOLDER`, "
                                 "or use --scorer-option refvnli.model=builtin")
    card = read_card(folder)
    dev = pick_device(device)
    net = RefvnliNet(NetConfig.from_dict(card["net"]))
    weights = folder / WEIGHTS_NAME
    if not weights.is_file():
        raise NotFoundError(f"RefVNLI card without weights: {weights} is missing",
                            hint="retrain with `fpr refvnli train` or copy the whole folder")
    state = load_file(str(weights))
    missing, unexpected = set(net.state_dict()) - set(state), set(state) - set(net.state_dict())
    if missing or unexpected:
        raise InputError(f"RefVNLI weights do not match the card: missing {sorted(missing)[:3]}, "
                         f"unexpected {sorted(unexpected)[:3]}", where=str(weights))
    net.load_state_dict(state, strict=True)
    encoder = cached_encoder(card["identity_encoder"]["id"], str(dev))
    want = card["identity_encoder"].get("weights_checksum")
    if want and encoder.weights.checksum != want:
        raise InputError(f"the RefVNLI model was trained on {card['identity_encoder']['id']} weights {want[:12]}, "
                         f"but {encoder.weights.checksum[:12]} are loaded", where=str(folder),
                         hint="load the encoder's original weights or retrain with `fpr refvnli train`")
    return LoadedModel(net.to(dev).eval(), encoder, card, folder, dev)


def save_model(net: RefvnliNet, card: dict, folder: Path) -> None:
    """Weights then card, each written atomically (a card never points at missing weights)."""
    from safetensors.torch import save_file

    from fpr.files import atomic_write_path, atomic_write_text

    state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    # One metadata key: safetensors orders a multi-key map at random, and the bytes must repeat. Through
    # fpr.files: written whole, with the umask's mode (safetensors alone creates owner-only files).
    atomic_write_path(folder / WEIGHTS_NAME, lambda tmp: save_file(
        state, str(tmp), metadata={"fpr_refvnli": f"{card.get('id', '')} {ARCHITECTURE}"}))
    atomic_write_text(folder / CARD_NAME, json.dumps(card, indent=2) + "\n")


__all__ = ["ARCHITECTURE", "BUILTIN_ID", "CARD_FORMAT", "CARD_NAME", "LoadedModel", "NetConfig", "ORDER",
           "RefvnliNet", "WEIGHTS_NAME", "builtin_dir", "identity_vectors", "is_checkpoint", "load_model",
           "ngrams", "read_card", "save_model", "scene_pixels", "text_batch", "token_ids"]
