"""Reading checkpoints the one safe way: pickled files with weights_only, wrapped or prefixed state dicts
unwrapped, safetensors conversion, and strict loading that names missing and unexpected keys.
"""
from __future__ import annotations

from pathlib import Path

from fpr.errors import ConflictError, InputError


def convert_to_safetensors(src: Path, dest: Path, *, encoder_id: str = "?") -> Path:
    """A pickled checkpoint -> a safetensors file of the same tensors (wrappers and ``module.`` removed)."""
    import torch
    from safetensors.torch import save_file

    state = read_state_dict(src, encoder_id=encoder_id)
    bad = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise InputError(f"checkpoint for encoder '{encoder_id}' holds non-tensor values (e.g. '{bad[0]}')",
                         where=str(src), hint="save the model's state_dict() only")
    # clone: safetensors refuses tensors that share memory (tied weights, views)
    save_file({k: v.detach().clone().contiguous() for k, v in state.items()}, str(dest))
    return dest


def read_state_dict(path: Path, *, encoder_id: str = "?") -> dict:
    """Tensors of a checkpoint: safetensors, or a pickle loaded with ``weights_only=True`` (never arbitrary code)."""
    import torch

    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path), device="cpu")
        else:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        raise InputError(f"cannot read weights for encoder '{encoder_id}' ({type(exc).__name__}: {first})",
                         where=str(path), hint="re-download the file; pickles that need code to load are refused")
    for wrapper in ("state_dict", "model", "module"):
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise InputError(f"weights file for encoder '{encoder_id}' is not a state dict", where=str(path))
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


def _names(keys: list[str], limit: int = 6) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f", ... (+{len(keys) - limit})" if len(keys) > limit else "")


def key_mismatch_error(encoder_id: str, where, missing: list[str], unexpected: list[str],
                       shapes: list[str] = (), *, hint: str) -> ConflictError:
    """One line naming the keys a checkpoint lacks, has in excess, or has with the wrong shape."""
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing key(s): {_names(missing)}")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected key(s): {_names(unexpected)}")
    if shapes:
        parts.append(f"{len(shapes)} shape mismatch(es): {_names(list(shapes), 3)}")
    return ConflictError(f"weights do not match encoder '{encoder_id}': " + "; ".join(parts), where=str(where),
                         hint=hint)


def load_strict(module, state: dict, *, encoder_id: str, where: str | Path) -> None:
    """``module.load_state_dict`` that fails as one line naming missing, unexpected and mis-shaped keys."""
    own = module.state_dict()
    missing = sorted(k for k in own if k not in state)
    unexpected = sorted(k for k in state if k not in own)
    shapes = sorted(f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in own
                    if k in state and hasattr(state[k], "shape") and tuple(state[k].shape) != tuple(own[k].shape))
    if missing or unexpected or shapes:
        raise key_mismatch_error(encoder_id, where, missing, unexpected, shapes,
                                 hint="check that the file belongs to this encoder (and its config to the weights)")
    module.load_state_dict(state, strict=True)
