"""The encoder registry: stable ids -> how to build, preprocess and find weights.

An encoder is one module in ``fpr/encoders/`` that calls :func:`register` with an
:class:`EncoderSpec`, plus its name in ``BUILTIN_MODULES``. Trained encoders that
live in the weights folder are found by *discoverers* (callables returning specs),
so ``fpr encoders train`` output shows up without code changes. A discoverer may
also yield a :class:`BrokenEncoder` (e.g. a trained encoder whose card does not
parse): it is listed with status ``broken`` and its reason, and loading it raises
that reason, instead of the encoder silently vanishing.

Provenance: an :class:`Encoder` knows its ``device_class`` (cpu/cuda/mps) and
``precision`` (fp32, or bf16/fp16 autocast on CUDA); both are part of its
embedding-cache key (:func:`embedding_key`) and of :attr:`Encoder.provenance`,
because the same weights give different vectors in bf16 on a GPU and fp32 on a CPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import torch

from fpr import keys
from fpr.encoders.catalog import (BUILTIN, DISCOVERING_MODULES, ENCODERS, VALID_DEVICES, check_batch_size,
                                  check_device, check_encoder_id, check_workers, describe_entry)
from fpr.encoders.cpu_forward import CPU_FORWARD, forward_microbatched, forward_part
from fpr.encoders.preprocess import Preprocessing
from fpr.encoders.weights import ResolvedWeights, Verification, WeightsSource, resolve_weights, verify_weights
from fpr.errors import InputError, NotFoundError, choices_hint

BUILTIN_MODULES = tuple(dict.fromkeys(m.rsplit(".", 1)[1] for m in (*BUILTIN.values(), *DISCOVERING_MODULES)))

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


@dataclass(frozen=True)
class BrokenEncoder:
    """An encoder that was found but cannot be used (e.g. its card is not valid JSON): why, and where."""

    id: str
    reason: str
    where: str = ""

    def error(self) -> InputError:
        return InputError(f"encoder '{self.id}' is broken: {self.reason}", where=self.where or None,
                          hint="fix or remove its card, or train it again with --overwrite")


ENCODERS.item_type = EncoderSpec  # the registry lives in fpr.encoders.catalog, where names are checked without torch
_REGISTRY = ENCODERS.items  # the registered encoders by id
_DISCOVERERS: list[Callable[[], Iterable[EncoderSpec | BrokenEncoder]]] = []


def register(spec: EncoderSpec, *, replace: bool = False) -> EncoderSpec:
    return ENCODERS.register(spec, replace=replace)


def unregister(encoder_id: str) -> None:
    ENCODERS.unregister(encoder_id)


def register_discoverer(fn: Callable[[], Iterable[EncoderSpec | BrokenEncoder]]) -> None:
    _DISCOVERERS.append(fn)


def _discovered() -> tuple[dict[str, EncoderSpec], dict[str, BrokenEncoder]]:
    ENCODERS.load_all()
    specs = dict(_REGISTRY)
    broken: dict[str, BrokenEncoder] = {}
    for discover in _DISCOVERERS:
        for found in discover():
            if found.id in specs or found.id in broken:
                continue
            if isinstance(found, BrokenEncoder):
                broken[found.id] = found
            else:
                specs[found.id] = found
    return dict(sorted(specs.items())), dict(sorted(broken.items()))


def all_specs() -> dict[str, EncoderSpec]:
    """Every usable encoder by id (registered, then discovered)."""
    return _discovered()[0]


def broken_encoders() -> dict[str, BrokenEncoder]:
    """Encoders that were found but cannot be used, with the reason (listed as ``broken``)."""
    return _discovered()[1]


def get_spec(encoder_id: str) -> EncoderSpec:
    """The encoder ``encoder_id``: a built-in one imports its module only; others are discovered."""
    found = ENCODERS.find(encoder_id)
    if found is not None:
        return found
    check_encoder_id(encoder_id)  # an unknown id is refused before every encoder module is imported
    specs, broken = _discovered()
    if encoder_id in broken:
        raise broken[encoder_id].error()
    if encoder_id not in specs:
        raise NotFoundError(f"unknown encoder '{encoder_id}'", hint=choices_hint(list(specs), "encoders")
                            + "; 'fpr encoders list' shows them")
    return specs[encoder_id]


def pick_device(device: str = "auto") -> torch.device:
    check_device(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise InputError(f"device '{device}' requested but no CUDA device is visible", hint="use --device cpu")
        n = torch.cuda.device_count()
        if ":" in device and int(device.split(":")[1]) >= n:
            raise InputError(f"device '{device}' requested but only {n} CUDA device(s) are visible",
                             hint=f"use cuda:0..cuda:{n - 1}")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise InputError("device 'mps' requested but no Apple GPU (MPS) is available", hint="use --device cpu")
    return torch.device(device)


def device_precision(device: torch.device) -> str:
    """The numeric precision :meth:`Encoder.embed_batch` runs the network in on ``device``."""
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


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
    def device_class(self) -> str:
        """``cpu``, ``cuda`` or ``mps``: the kind of device that computes the embeddings."""
        return self.device.type

    @property
    def precision(self) -> str:
        """``fp32`` (CPU, MPS), or the autocast dtype on CUDA: ``bf16`` (or ``fp16`` without bf16 support)."""
        return device_precision(self.device)

    @property
    def verification(self) -> "Verification":
        """Whether the loaded weights are the published ones (see :func:`fpr.encoders.weights.verify_weights`)."""
        return verify_weights(self.id, self.spec.weights, self.weights)

    @property
    def cache_key(self) -> str:
        """The embedding-cache key: encoder id, weights checksum, protocol, device class and precision."""
        return embedding_key(self.spec, self.weights, device=self.device_class, precision=self.precision)

    @property
    def provenance(self) -> dict:
        """What the vectors depend on, for index cards and runs."""
        return {"encoder": self.id, "weights_checksum": self.weights.checksum,
                "preprocessing": self.preprocessing.key(), "device": self.device_class,
                "precision": self.precision, "embedding_key": self.cache_key}

    def embed_batch(self, batch: torch.Tensor, *, normalize: bool = True,
                    amp_dtype: torch.dtype | None = None) -> np.ndarray:
        """Preprocessed (B,3,H,W) -> L2-normalised float32 (B,dim); ``normalize=False``: the raw features.

        ``batch`` may also be the protocol's uint8 pixels (B,H,W,3) (:meth:`Preprocessing.pixels`): they
        are copied as they are and normalised on the device, bit-identical to the float batch.

        ``amp_dtype`` picks the CUDA autocast type (default :attr:`precision`: bfloat16 where
        supported, else float16). On a CPU the network only ever sees zero-padded micro-batches
        of one shape in channels-last layout, each on one thread (:mod:`fpr.encoders.cpu_forward`), so every embedding is
        independent of its batch, its position and the thread count, bit for bit
        (docs/architecture.md, "Embedding determinism"). On CUDA the batch runs as one.
        """
        with torch.inference_mode():
            x = self._on_device(batch)
            if self.device.type == "cuda":
                x = x.contiguous(memory_format=torch.channels_last)
                dtype = amp_dtype or (torch.bfloat16 if self.precision == "bf16" else torch.float16)
                with torch.autocast("cuda", dtype=dtype):
                    feats = self.model(x)
            elif self.device.type == "cpu":
                feats = forward_microbatched(self.model, x)
            else:
                feats = self.model(x)
            return self._finish(feats, normalize)

    def embed_microbatch(self, batch: torch.Tensor, *, normalize: bool = True) -> np.ndarray:
        """:meth:`embed_batch` for one CPU micro-batch (at most ``CPU_MICROBATCH`` rows) on the calling
        thread, bit-identical to it; for callers that run micro-batches on their own threads inside
        :func:`fpr.encoders.cpu_forward.single_threaded_ops` (the CPU pipeline of ``embed_paths``)."""
        if self.device.type != "cpu":
            raise RuntimeError(f"embed_microbatch is the CPU protocol; encoder {self.id} is on {self.device}")
        with torch.inference_mode():
            return self._finish(forward_part(self.model, self._on_device(batch)), normalize)

    def _on_device(self, batch: torch.Tensor) -> torch.Tensor:
        x = batch.to(self.device, non_blocking=True)
        return self.preprocessing.normalize(x) if x.dtype == torch.uint8 else x

    def _finish(self, feats: torch.Tensor, normalize: bool) -> np.ndarray:
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


def embedding_key(spec: EncoderSpec, weights: ResolvedWeights, *, device: str, precision: str) -> str:
    """Cache key: encoder id + weights checksum + the full preprocessing protocol + device class + precision
    (+ on a CPU the forward protocol, :data:`~fpr.encoders.cpu_forward.CPU_FORWARD`)."""
    parts = [spec.id, weights.checksum, spec.preprocessing.key(), f"device={device}", f"precision={precision}"]
    if device == "cpu":
        parts.append(f"forward={CPU_FORWARD}")
    text = "|".join(parts)
    return keys.sha256_hex(text)[:32]


def load_encoder(encoder_id: str, *, weights: str | None = None, device: str = "auto") -> Encoder:
    """Build an encoder on ``device`` (auto, cpu, cuda, cuda:N, mps); bad values are one InputError."""
    check_device(device)
    spec = get_spec(encoder_id)
    resolved = resolve_weights(spec.id, spec.weights, explicit=weights)
    model = spec.build(resolved)
    return Encoder(spec, resolved, model, pick_device(device))


def spec_entry(spec: EncoderSpec) -> dict:
    """What ``fpr encoders list`` shows of a spec beside its weights (as :mod:`fpr.encoders.catalog` keeps it)."""
    return {"family": spec.family, "dim": spec.dim, "input": spec.input_size, "preprocessing": spec.preprocessing.name,
            "description": spec.description, "text": spec.build_text is not None}


def describe(spec: EncoderSpec) -> dict:
    """One row of ``fpr encoders list``: honest status, never raising."""
    return describe_entry(spec.id, spec_entry(spec), spec.weights)


def describe_broken(broken: BrokenEncoder) -> dict:
    """The ``fpr encoders list`` row of a broken encoder: status ``broken`` and why."""
    return {"id": broken.id, "family": None, "dim": None, "input": None, "preprocessing": None,
            "status": "broken", "weights": None, "found_in": None, "checksum": None, "verified": "-",
            "verification": None, "text": False,
            "description": "", "reason": broken.reason, "card": broken.where}
