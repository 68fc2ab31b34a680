"""Reading images the one way fpr reads them everywhere.

EXIF orientation is applied and every PIL mode (L, P, RGBA, CMYK, I;16, ...) is
converted to RGB, so an image embeds the same whether it came from a camera, a
PNG with transparency or a palette GIF. The content hash (SHA-256 of the file's
bytes) is the image's identity in caches and galleries: renaming a file does not
invalidate its embedding, editing it does.
"""
from __future__ import annotations

import hashlib
import io
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError

from fpr.errors import InputError

# Decompression bombs are refused above this many pixels (PIL's default warns only).
MAX_PIXELS = 20_000 * 20_000


def read_bytes(path: str | Path) -> bytes:
    p = Path(path)
    if not p.exists():
        raise InputError("image file not found", where=str(p), hint="check the path in your manifest")
    if p.is_dir():
        raise InputError("expected an image file, found a folder", where=str(p))
    data = p.read_bytes()
    if not data:
        raise InputError("image file is empty (0 bytes)", where=str(p), hint="re-copy or remove it")
    return data


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def decode_rgb(data: bytes, where: str = "<bytes>") -> Image.Image:
    """Fully decode ``data`` to an RGB image with EXIF orientation applied."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.width * im.height > MAX_PIXELS:
                raise InputError(f"image is too large ({im.width}x{im.height})", where=where)
            im.load()
            im = ImageOps.exif_transpose(im)
            return to_rgb(im)
    except InputError:
        raise
    except Image.DecompressionBombError:  # PIL refuses some bombs itself, before our size check runs
        raise InputError("image is too large (a decompression bomb)", where=where) from None
    except UnidentifiedImageError:
        raise InputError("not a readable image (unknown format)", where=where,
                         hint="remove it or convert it to JPEG/PNG") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise InputError(f"image is truncated or corrupt ({exc})", where=where,
                         hint="re-copy or remove it") from None


def to_rgb(im: Image.Image) -> Image.Image:
    if im.mode == "RGB":
        return im
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        # Transparent pixels go on white, not on whatever colour their RGB happens to hold.
        rgba = im.convert("RGBA")
        canvas = Image.new("RGB", rgba.size, (255, 255, 255))
        canvas.paste(rgba, mask=rgba.getchannel("A"))
        return canvas
    if im.mode.startswith("I;16") or im.mode == "I":
        # 16/32-bit greyscale: scale to 8 bits instead of clipping.
        import numpy as np

        arr = np.asarray(im, dtype=np.float64)
        hi = arr.max() or 1.0
        return Image.fromarray((arr / hi * 255.0).astype("uint8"), mode="L").convert("RGB")
    return im.convert("RGB")


def load_rgb(path: str | Path) -> Image.Image:
    return decode_rgb(read_bytes(path), where=str(path))


def check_image(path: str | Path) -> str:
    """Read, fully decode and hash an image; return its content hash or raise InputError."""
    data = read_bytes(path)
    decode_rgb(data, where=str(path))
    return content_hash(data)


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
