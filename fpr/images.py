"""Reading images the one way fpr reads them everywhere.

EXIF orientation is applied and every PIL mode (L, P, RGBA, CMYK, I;16, ...) is
converted to RGB, so an image embeds the same whether it came from a camera, a
PNG with transparency or a palette GIF. 16-bit greyscale is scaled by its bit
depth (65535 -> 255), never by the image's own maximum, so a 16-bit copy of a
picture decodes to the same RGB as its 8-bit version.

Decompression bombs: an image declaring more than :data:`MAX_PIXELS` pixels is
refused (InputError naming the file) before its pixels are decoded, whether
fpr's check or PIL's own ``DecompressionBombError`` sees it first; PIL's
``DecompressionBombWarning`` (below that limit) is silenced because fpr
enforces its own limit. The content hash (SHA-256 of the file's
bytes) is the image's identity in caches and galleries: renaming a file does not
invalidate its embedding, editing it does.
"""
from __future__ import annotations

import io
import re
import warnings
from pathlib import Path

from PIL import Image, ImageOps, UnidentifiedImageError

from fpr import keys
from fpr.errors import InputError

# Decompression bombs are refused above this many pixels: PIL's own error threshold
# (2 x Image.MAX_IMAGE_PIXELS by default), so both checks agree; about 179 megapixels.
MAX_PIXELS = 2 * 89_478_485
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


def read_bytes(path: str | Path) -> bytes:
    p = Path(path)
    if not p.exists():
        raise InputError("image file not found", where=str(p), hint="check the path in the table that lists it "
                         "(a relative path there resolves against that table's folder)")
    if p.is_dir():
        raise InputError("expected an image file, found a folder", where=str(p))
    data = p.read_bytes()
    if not data:
        raise InputError("image file is empty (0 bytes)", where=str(p), hint="re-copy or remove it")
    return data


def content_hash(data: bytes) -> str:
    return keys.sha256_hex(data)


def decode_rgb(data: bytes, where: str = "<bytes>") -> Image.Image:
    """Fully decode ``data`` to an RGB image with EXIF orientation applied."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.width * im.height > MAX_PIXELS:
                raise _too_large(f"{im.width}x{im.height}", where)
            im.load()
            im = ImageOps.exif_transpose(im)
            return to_rgb(im)
    except InputError:
        raise
    except Image.DecompressionBombError as exc:
        numbers = re.findall(r"\d+", str(exc))  # "Image size (900000000 pixels) exceeds limit of ..."
        raise _too_large(f"{numbers[0] if numbers else 'too many'} pixels", where) from None
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
        # 16-bit greyscale (or 32-bit integer): scale by the bit depth, like any viewer, so the
        # same picture in 8 and 16 bits decodes alike (v8 * 257 -> v8).
        import numpy as np

        bits = bit_depth(im)
        arr = np.asarray(im).astype(np.float64)
        scaled = np.rint(np.clip(arr, 0, 2 ** bits - 1) * (255.0 / (2 ** bits - 1)))
        return Image.fromarray(scaled.astype("uint8"), mode="L").convert("RGB")
    return im.convert("RGB")


def bit_depth(im: Image.Image) -> int:
    """Bits per sample of an integer greyscale image: 16 for I;16*, the TIFF tag for a TIFF in mode I, else 16.

    PIL opens 16-bit greyscale PNG/PGM/TIFF as I;16* or I; mode I from a 32-bit TIFF says so in its tags.
    """
    if im.mode.startswith("I;16"):
        return 16
    tags = getattr(im, "tag_v2", None)
    if tags is not None:
        bps = tags.get(258)
        bps = bps[0] if isinstance(bps, tuple) else bps
        if isinstance(bps, int) and 1 <= bps <= 32:
            return bps
    return 16


# The smallest image side and the most elongated shape a vision model's preprocessing reads: below these its
# resize rounds a side to 0 px (rapidocr's detector at 4000x20, a DETR processor's longest-edge cap) or leaves
# nothing to segment (a 1x1 image). Scorers give such an image NaN with :func:`shape_reason`'s phrase.
MODEL_MIN_SIDE = 8  # px
MODEL_MAX_ASPECT = 20.0  # longer side / shorter side


def shape_reason(size: tuple[int, int], *, min_side: int = MODEL_MIN_SIDE,
                 max_aspect: float = MODEL_MAX_ASPECT) -> str | None:
    """Why a model cannot read an image of ``size`` (width, height): ``image too small: 1x1 px (...)`` or
    ``image too thin: 4000x20 px (...)``, the phrase before the colon stable for counting; None when it can."""
    w, h = size
    if min(w, h) < min_side:
        return f"image too small: {w}x{h} px (a side under {min_side} px)"
    if max(w, h) / min(w, h) > max_aspect:
        return f"image too thin: {w}x{h} px (sides {max(w, h) / min(w, h):.0f}:1, over {max_aspect:.0f}:1)"
    return None


def _too_large(size: str, where: str) -> InputError:
    return InputError(f"image declares {size} (more than {MAX_PIXELS} pixels: refused as a possible "
                      "decompression bomb)", where=where, hint="downscale it, or remove it from the manifest")


def load_rgb(path: str | Path) -> Image.Image:
    return decode_rgb(read_bytes(path), where=str(path))


def check_image(path: str | Path) -> str:
    """Read, fully decode and hash an image; return its content hash or raise InputError."""
    data = read_bytes(path)
    decode_rgb(data, where=str(path))
    return content_hash(data)


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
