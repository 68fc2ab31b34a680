"""fpr/images.py: decompression bombs are one InputError (and skippable); 16-bit is scaled by bit depth."""
from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from fpr.errors import InputError
from fpr.images import MAX_PIXELS, bit_depth, check_image, decode_rgb, to_rgb
from tests.conftest import write_image


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def bomb_png(width: int = 30000, height: int = 30000) -> bytes:
    """A ~60-byte PNG whose header declares width x height RGB pixels (written by hand)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(b"\0" * 16))
            + _chunk(b"IEND", b""))


def test_a_png_declaring_30000x30000_is_refused_naming_the_file(tmp_path):
    p = tmp_path / "bomb.png"
    p.write_bytes(bomb_png())
    assert len(p.read_bytes()) < 100
    with pytest.raises(InputError) as err:
        check_image(p)
    msg = err.value.one_line()
    assert str(p) in msg and "900000000" in msg and "decompression bomb" in msg and "\n" not in msg


def test_fprs_own_limit_applies_when_pils_is_off(tmp_path, monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # a library user turned PIL's check off
    with pytest.raises(InputError, match="decompression bomb"):
        decode_rgb(bomb_png(20000, 10000), where="big.png")
    assert 20000 * 10000 > MAX_PIXELS


@pytest.mark.parametrize("workers", [0, 2])
def test_skip_unreadable_skips_bombs_also_in_worker_processes(tmp_path, workers):
    from fpr.encoders.embed import embed_paths
    from fpr.encoders.registry import load_encoder

    enc = load_encoder("pixels-16", device="cpu")
    good = [write_image(tmp_path / f"g{i}.png", seed=i) for i in range(3)]
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(bomb_png())
    paths = [good[0], bomb, good[1], good[2]]
    with pytest.raises(InputError, match="bomb.png"):
        embed_paths(enc, paths, cache=None, workers=workers)
    res = embed_paths(enc, paths, cache=None, workers=workers, on_error="skip")
    assert list(res.failed) == [1] and "decompression bomb" in res.failed[1]
    alone = embed_paths(enc, good, cache=None, workers=0).vectors
    assert np.isnan(res.vectors[1]).all()
    assert res.vectors[[0, 2, 3]].tobytes() == alone.tobytes()


def _picture() -> np.ndarray:
    """A smooth 8-bit greyscale picture (gradient + disc) that does not reach full white."""
    y, x = np.mgrid[0:64, 0:64]
    pic = 40 + x * 1.5 + 60 * (((x - 30) ** 2 + (y - 34) ** 2) < 200)
    return np.clip(pic, 0, 200).astype(np.uint8)


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def test_16_bit_png_decodes_like_its_8_bit_version():
    pic8 = _picture()
    assert pic8.max() < 255  # scaling by the image's own maximum would brighten it
    data16 = _png(pic8.astype(np.uint16) * 257)  # the exact 16-bit rendering of each 8-bit level
    with Image.open(io.BytesIO(data16)) as im:
        assert im.mode in ("I;16", "I") and bit_depth(im) == 16
    rgb16 = np.asarray(decode_rgb(data16))
    rgb8 = np.asarray(decode_rgb(_png(pic8)))
    assert rgb16.dtype == np.uint8 and rgb16.tobytes() == rgb8.tobytes()
    # a genuinely 16-bit picture (levels between the 8-bit ones) rounds to the nearest 8-bit level
    fine = (pic8.astype(np.float64) * 257 + 100).astype(np.uint16)
    got = np.asarray(decode_rgb(_png(fine)))[..., 0].astype(int)
    assert np.abs(got - np.rint(fine / 257.0)).max() == 0


@pytest.mark.parametrize("mode", ["I;16", "I;16B", "I"])
def test_every_16_bit_greyscale_mode_is_scaled_by_bit_depth(mode):
    pic8 = _picture()
    v16 = pic8.astype(np.uint16) * 257
    if mode == "I":
        im = Image.fromarray(v16.astype(np.int32), mode="I")
    elif mode == "I;16B":
        im = Image.frombytes("I;16B", (64, 64), v16.astype(">u2").tobytes())
    else:
        im = Image.frombytes("I;16", (64, 64), v16.astype("<u2").tobytes())
    assert im.mode == mode
    np.testing.assert_array_equal(np.asarray(to_rgb(im)), np.repeat(pic8[..., None], 3, axis=2))


def test_16_bit_and_8_bit_copies_embed_alike(tmp_path):
    from fpr.encoders.embed import embed_paths
    from fpr.encoders.registry import load_encoder

    pic8 = _picture()
    (tmp_path / "p8.png").write_bytes(_png(pic8))
    fine = (pic8.astype(np.float64) * 257 + 90).astype(np.uint16)  # 16-bit detail between 8-bit levels
    (tmp_path / "p16.png").write_bytes(_png(fine))
    enc = load_encoder("fpr-world-v1", device="cpu")
    v = embed_paths(enc, [tmp_path / "p8.png", tmp_path / "p16.png"], cache=None, workers=0).vectors
    assert float(v[0] @ v[1]) > 0.999


def test_every_degenerate_image_reads_the_one_way(tmp_path):
    """#33's degenerate images (tests/degenerate_images.py) through the one reader: EXIF orientation applied,
    transparency on white, CMYK / 16-bit / palette to RGB, an animation's first frame; and which of them a model
    cannot read (shape_reason)."""
    from fpr.images import load_rgb, shape_reason
    from tests.degenerate_images import write_degenerate_images

    paths = write_degenerate_images(tmp_path)
    got = {name: load_rgb(p) for name, p in paths.items()}
    assert all(im.mode == "RGB" for im in got.values())
    arr = {name: np.asarray(im).astype(int) for name, im in got.items()}
    assert (arr["uniform-grey"] == 128).all() and (arr["black"] == 0).all()
    assert arr["one-pixel"].tolist() == [[[200, 30, 60]]]
    assert (arr["alpha-only"] == 255).all()  # fully transparent: white, not the hidden RGB
    with Image.open(paths["exif-rotated"]) as raw:
        assert raw.size == (80, 48) and got["exif-rotated"].size == (48, 80)
        upright = np.asarray(raw.convert("RGB").transpose(Image.Transpose.ROTATE_270)).astype(int)
    assert (arr["exif-rotated"] == upright).all()
    with Image.open(paths["animated"]) as gif:
        assert gif.n_frames == 2
        first = np.asarray(gif.convert("RGB")).astype(int)
    assert (arr["animated"] == first).all()
    with Image.open(paths["palette"]) as pal:
        assert pal.mode == "P" and (arr["palette"] == np.asarray(pal.convert("RGB"))).all()
    with Image.open(paths["sixteen-bit"]) as g16:
        assert g16.mode == "I;16"
        eight = np.rint(np.asarray(g16).astype(np.float64) / 257.0)
    assert (arr["sixteen-bit"] == eight[..., None]).all() and (arr["sixteen-bit"][..., 0] == arr["sixteen-bit"][..., 2]).all()
    with Image.open(paths["cmyk"]) as cmyk:
        assert cmyk.mode == "CMYK" and (arr["cmyk"] == np.asarray(cmyk.convert("RGB"))).all()
    reasons = {name: shape_reason(im.size) for name, im in got.items()}
    assert reasons.pop("one-pixel") == "image too small: 1x1 px (a side under 8 px)"
    assert reasons.pop("strip-4000x20") == "image too thin: 4000x20 px (sides 200:1, over 20:1)"
    assert set(reasons.values()) == {None}
