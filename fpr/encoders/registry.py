"""The encoder registry: stable ids -> how to build, preprocess and find weights.

An encoder is one module in ``fpr/encoders/`` that calls :func:`register` with an
:class:`EncoderSpec`, plus its name in ``BUILTIN_MODULES``. Trained encoders that
live in the weights folder are found by *discoverers* (callables returning specs),
so ``fpr encoders train`` output shows up without code changes.
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import torch

from fpr.encoders.preprocess import Preprocessing
from fpr.encoders.weights import ResolvedWeights, WeightsSource, resolve_weights
from fpr.errors import NotFoundError, choices_hint

# Modules whose import registers encoders. Each must import cheaply (heavy
# libraries such as open_clip are imported inside the build functions).
BUILTIN_MODULES = ("baselines", "world", "trained", "clip", "dinov2", "bioclip", "miewid")

ModelBuilder = Callable[[ResolvedWeights], torch.nn.Module]


@dataclass(frozen=True)
class EncoderSpec:
    """Everything fpr needs to know about an encoder before loading it.

    ``build`` returns a module mapping a preprocessed batch (B,3,H,W) to features
    (B,dim); fpr L2-normalises them. ``build_text`` (optional) returns a callable
    mapping a list of strings to (B,dim) features in the same space (CLIP-T).
    """

    id: str
    family: str
    dim: int
    preprocessing: Preprocessing
    weights: WeightsSource
    build: ModelBuilder
    description: str = ""
    build_text: Callable[[ResolvedWeights], Callable[[list[str]], torch.Tensor]] | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def input_size(self) -> int:
        return self.preprocessing.output_size


_REGISTRY: dict[str, EncoderSpec] = {}
_DISCOVERERS: list[Callable[[], Iterable[EncoderSpec]]] = []
_LOADED = False
_LOCK = threading.Lock()


def register(spec: EncoderSpec, *, replace: bool = False) -> EncoderSpec:
    if spec.id in _REGISTRY and not replace:
        raise ValueError(f"encoder id {spec.id!r} is already registered")
    _REGISTRY[spec.id] = spec
    return spec


def unregister(encoder_id: str) -> None:
    _REGISTRY.pop(encoder_id, None)


def register_discoverer(fn: Callable[[], Iterable[EncoderSpec]]) -> None:
    _DISCOVERERS.append(fn)


def _ensure_loaded() -> None:
    global _LOADED
    with _LOCK:
        if _LOADED:
            return
        for name in BUILTIN_MODULES:
            try:
                importlib.import_module(f"fpr.encoders.{name}")
            except ModuleNotFoundError as exc:
                # A module listed but not written yet must not break the others.
                if exc.name != f"fpr.encoders.{name}":
                    raise
        _LOADED = True


def all_specs() -> dict[str, EncoderSpec]:
    _ensure_loaded()
    specs = dict(_REGISTRY)
    for discover in _DISCOVERERS:
        for spec in discover():
            specs.setdefault(spec.id, spec)
    return dict(sorted(specs.items()))


def get_spec(encoder_id: str) -> EncoderSpec:
    specs = all_specs()
    if encoder_id not in specs:
        raise NotFoundError(f"unknown encoder '{encoder_id}'", hint=choices_hint(list(specs), "encoders")
                            + "; 'fpr encoders list' shows them")
    return specs[encoder_id]


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        from fpr.errors import InputError

        raise InputError(f"device '{device}' requested but no CUDA device is visible", hint="use --device cpu")
    return torch.device(device)


class Encoder:
    """A loaded encoder: spec + resolved weights + model on a device."""

    def __init__(self, spec: EncoderSpec, weights: ResolvedWeights, model: torch.nn.Module,
                 device: torch.device):
        self.spec = spec
        self.weights = weights
        self.device = device
        self.model = model.eval().to(device)
        if device.type == "cuda":
            self.model = self.model.to(memory_format=torch.channels_last)
        self._text = None

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def preprocessing(self) -> Preprocessing:
        return self.spec.preprocessing

    @property
    def cache_key(self) -> str:
        return embedding_key(self.spec, self.weights)

    def embed_batch(self, batch: torch.Tensor, *, normalize: bool = True,
                    amp_dtype: torch.dtype | None = None) -> np.ndarray:
        """Preprocessed (B,3,H,W) -> L2-normalised float32 (B,dim); ``normalize=False``: the raw features.

        ``amp_dtype`` picks the CUDA autocast type (default bfloat16 where supported, else float16)."""
        with torch.inference_mode():
            x = batch.to(self.device, non_blocking=True)
            if self.device.type == "cuda":
                x = x.contiguous(memory_format=torch.channels_last)
                dtype = amp_dtype or (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
                with torch.autocast("cuda", dtype=dtype):
                    feats = self.model(x)
            else:
                feats = self.model(x)
            feats = feats.float()
            if feats.ndim != 2 or feats.shape[1] != self.spec.dim:
                raise RuntimeError(f"encoder {self.id} produced shape {tuple(feats.shape)}, "
                                   f"expected (B, {self.spec.dim})")
            if normalize:
                feats = torch.nn.functional.normalize(feats, dim=1)
        return feats.cpu().numpy().astype(np.float32, copy=False)

    def embed_text(self, texts: list[str]) -> np.ndarray:
        if self.spec.build_text is None:
            raise NotFoundError(f"encoder '{self.id}' has no text tower",
                                hint="use an encoder with one, e.g. clip-vit-b-32")
        if self._text is None:
            self._text = self.spec.build_text(self.weights)
        with torch.inference_mode():
            feats = self._text(texts).float()
            feats = torch.nn.functional.normalize(feats, dim=1)
        return feats.cpu().numpy().astype(np.float32, copy=False)


def embedding_key(spec: EncoderSpec, weights: ResolvedWeights) -> str:
    """Cache key: encoder id + weights checksum + the full preprocessing protocol."""
    import hashlib

    text = "|".join([spec.id, weights.checksum, spec.preprocessing.key()])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def load_encoder(encoder_id: str, *, weights: str | None = None, device: str = "auto") -> Encoder:
    spec = get_spec(encoder_id)
    resolved = resolve_weights(spec.id, spec.weights, explicit=weights)
    model = spec.build(resolved)
    return Encoder(spec, resolved, model, pick_device(device))


def describe(spec: EncoderSpec) -> dict:
    """One row of ``fpr encoders list``: honest status, never raising."""
    resolved = resolve_weights(spec.id, spec.weights, required=False)
    status = "available" if resolved.found else "missing"
    return {
        "id": spec.id,
        "family": spec.family,
        "dim": spec.dim,
        "input": spec.input_size,
        "preprocessing": spec.preprocessing.name,
        "status": status,
        "weights": str(resolved.path) if resolved.path else None,
        "found_in": resolved.where if resolved.found else None,
        "checksum": resolved.checksum if resolved.found else None,
        "text": spec.build_text is not None,
        "description": spec.description,
    }
