"""Encoders and local model checks shared by evaluation code (scorers, filters).

A plain helper module (not a scorer), so scorers that need an encoder or a local
Hugging Face model import it instead of importing each other.
"""
from __future__ import annotations

from pathlib import Path

from fpr.cache import load_once
from fpr.encoders.registry import Encoder, get_spec, load_encoder
from fpr.errors import NotFoundError



def cached_encoder(encoder_id: str, device: str) -> Encoder:
    """Load an encoder once per process (filtering calls scorers chunk after chunk); keeps the last two.

    A missing-weights error is the registry's own one-line :class:`~fpr.errors.NotFoundError`.
    """
    spec = get_spec(encoder_id)
    return load_once("scorer encoders", (encoder_id, device, id(spec)), lambda: load_encoder(encoder_id, device=device))


def check_local_model(model_id: str, what: str) -> None:
    """One line (the model, the command that fetches it) unless ``model_id`` is a folder written by
    ``save_pretrained`` or a Hugging Face id whose ``config.json`` is in the local cache; never downloads."""
    from huggingface_hub import try_to_load_from_cache

    folder = Path(model_id)
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise NotFoundError(f"{what} folder has no config.json", where=str(folder / "config.json"),
                                hint="give a folder written by save_pretrained")
        return
    if not isinstance(try_to_load_from_cache(model_id, "config.json"), str):
        raise NotFoundError(f"{what} {model_id} is not in the local Hugging Face cache (config.json missing)",
                            where=model_id,
                            hint=f"fetch it with: huggingface-cli download {model_id} (or pass a local folder)")
