"""``fpr refvnli data``: RefVNLI training triplets from the built-in world or a manifest of masked frames.

Sources of frames (:class:`fpr.scorers.refvnli.data.Frame`):

- ``world``: per species, ``sets`` sets of ``scenes`` training identities (never
  evaluation identities), each identity one *scene* -- a background, its crop and a
  lighting kept for all its frames, as in a video shot -- of ``frames`` frames, each in
  its own pose. The subject mask is the rendered animal where the occluder does not
  hide it; the description (:func:`describe_view`) is read off the view: facing,
  visibility, light, size in the frame, setting.
- a folder: ``<folder>/<identity>/*.png`` (each identity a scene of the folder's entity) or
  video frames ``<folder>/<scene>/<entity>/*.png`` (:func:`folder_frames`); the whole image
  is the subject's mask and prompts carry no details.
- a manifest (CSV/Parquet) with ``path,entity,subject,scene,set,details`` and ``mask``
  or ``box``: ``mask`` an image whose non-zero pixels are the subject, ``box``
  ``x0,y0,x1,y1`` in pixels (ends exclusive; the box is then the subject's mask: crops
  and corruption patches come from it), ``details``
  ``slot=value;slot=value`` in prompt order, optional ``noun`` (the subject's word in
  prompts, default the entity). Relative paths resolve against the manifest's folder.

Output folder: ``frames/``, ``crops/``, ``corrupted/`` (PNG), ``triplets.parquet`` or
``.csv`` (paths relative to the folder) and ``refvnli-data.json`` (settings, source,
counts). The same seed gives the same bytes.
"""
from __future__ import annotations

import io
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from fpr.cards import utf8_path
from fpr.errors import InputError
from fpr.files import atomic_write_dir, safe_stem
from fpr.keys import fingerprint, keyed_rng
from fpr.scorers.refvnli import data as rd

DATA_CARD = "refvnli-data.json"  # the card of a data folder (read back by `fpr refvnli train`)
DATA_FORMAT = "fpr-refvnli-data/1"
MANIFEST_COLUMNS = ("path", "entity", "subject", "scene", "set", "details")  # + mask or box
TRIPLET_COLUMNS = ["triplet_id", "reference_path", "target_path", "prompt", "sp", "ta", "pair_kind", "prompt_kind",
                   "prompt_source", "reference_frame", "target_frame", "entity", "corruption_mse"]
SETTING_TEXT = {"grass": "on grass", "savanna": "in the savanna", "bush": "in the bush", "rock": "among rocks",
                "dusk": "at dusk", "snow": "in the snow", "beach": "on a beach", "studio": "in a studio",
                "water": "by the water"}
DIM_BELOW, BRIGHT_ABOVE = 0.9, 1.1  # world brightness factor -> dim / soft / bright
SMALL_ABOVE = 1.15  # world view scale (canvas / image side) above which the animal is small in the frame


@dataclass(frozen=True)
class WorldFrames:
    """The world source's settings."""

    species: tuple[str, ...] = ("zebra", "leopard", "giraffe")
    sets: int = 2  # per species
    scenes: int = 2  # per set (the paper: 2)
    frames: int = 2  # per scene (the paper: 2)
    size: int = 96
    seed: int = 0

    def check(self) -> None:
        from fpr.galleries.world import WorldConfig

        WorldConfig(species=self.species, size=self.size)  # the world's own checks of species and image size
        if self.sets < 1 or self.scenes < 2 or self.frames < 2:
            raise InputError("the world source needs >= 1 set, >= 2 scenes per set and >= 2 frames per scene",
                             hint="a positive pair needs two frames of a scene, a negative one a second scene")


def describe_view(species: str, view) -> rd.Description:
    """The world view's details in prompt order: facing, visibility, light, size in the frame, setting."""
    brightness = float(view.light[0])
    light = "dim" if brightness < DIM_BELOW else "bright" if brightness > BRIGHT_ABOVE else "soft"
    return rd.Description(species, (
        ("facing", "left" if view.mirror else "right"),  # the unmirrored animal's head is on the right
        ("visibility", "partly hidden" if view.occlusion is not None else "in full view"),
        ("light", light),
        ("size", "small in the frame" if view.scale > SMALL_ABOVE else "filling the frame"),
        ("setting", SETTING_TEXT[view.family]),
    ))


def world_slots() -> dict[str, tuple[str, ...]]:
    """Every value each world detail can take: what a changed-detail prompt may draw."""
    return {"facing": ("left", "right"), "visibility": ("in full view", "partly hidden"),
            "light": ("bright", "dim", "soft"), "size": ("filling the frame", "small in the frame"),
            "setting": tuple(sorted(SETTING_TEXT.values()))}


def world_frames(config: WorldFrames) -> list[rd.Frame]:
    """Frames of training identities: a scene keeps background and light, each frame draws its own pose."""
    from fpr.galleries.world import FAMILIES, identity_markings, identity_name, train_identities
    from fpr.galleries.world.render import animal_layer, compose, sample_view, visible_subject

    config.check()
    out = []
    for species in config.species:
        idents = train_identities(species, config.sets * config.scenes, seed=config.seed)
        for s in range(config.sets):
            set_id = f"{species}-set{s:03d}"
            for ident in idents[s * config.scenes:(s + 1) * config.scenes]:
                name = identity_name(species, ident)
                markings = identity_markings(species, ident)
                scene_view = sample_view(keyed_rng("refvnli-scene", config.seed, name), config.size, FAMILIES)
                for k in range(config.frames):
                    rng = keyed_rng("refvnli-frame", config.seed, name, k)
                    poses = "novel" if rng.random() < 0.5 else "real"
                    view = replace(sample_view(rng, config.size, FAMILIES, poses=poses), family=scene_view.family,
                                   bg_seed=scene_view.bg_seed, light=scene_view.light)
                    layer = animal_layer(markings, view)
                    image = np.asarray(compose(layer, view), np.uint8)
                    out.append(rd.Frame(f"{set_id}-{name}-f{k}", set_id, species, name, f"{name}-scene",
                                        image, visible_subject(layer, view), describe_view(species, view)))
    return out


def _parse_details(text: str, where: str) -> tuple[tuple[str, str], ...]:
    details = []
    for part in (p.strip() for p in text.split(";") if p.strip()):
        slot, eq, value = part.partition("=")
        if not eq or not slot.strip() or not value.strip():
            raise InputError(f"details must be 'slot=value;slot=value', got '{part}'", where=where)
        details.append((slot.strip(), value.strip()))
    return tuple(details)


def _read_rgb(path: str) -> np.ndarray:
    from fpr.images import load_rgb

    return np.asarray(load_rgb(path), np.uint8)


def _box_mask(text: str, shape: tuple[int, int], where: str) -> np.ndarray:
    """A subject box ``x0,y0,x1,y1`` (pixels, ends exclusive) as a mask: crops and patches come from the box."""
    try:
        x0, y0, x1, y1 = (int(round(float(v))) for v in text.split(","))
    except ValueError:
        raise InputError(f"box must be 'x0,y0,x1,y1' in pixels, got '{text}'", where=where) from None
    h, w = shape
    if not (0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h):
        raise InputError(f"box {text} is empty or outside the {w}x{h} image", where=where)
    mask = np.zeros(shape, bool)
    mask[y0:y1, x0:x1] = True
    return mask


def _subject_mask(row, image: np.ndarray, base: Path, where: str) -> np.ndarray:
    from fpr.tables import resolve_path

    if str(row.get("mask", "") or ""):
        mask = _read_rgb(resolve_path(row["mask"], base)).max(axis=2) > 0
        if mask.shape != image.shape[:2]:
            raise InputError(f"mask is {mask.shape[1]}x{mask.shape[0]} but its image is "
                             f"{image.shape[1]}x{image.shape[0]}", where=where)
        return mask
    if str(row.get("box", "") or ""):
        return _box_mask(str(row["box"]), image.shape[:2], where)
    raise InputError("a frame needs a subject mask or box", where=where,
                     hint="fill the 'mask' column (an image, subject pixels non-zero) or 'box' (x0,y0,x1,y1)")


def manifest_frames(path: str | Path) -> list[rd.Frame]:
    """Frames listed in a manifest (``path,entity,subject,scene,set,details`` and ``mask`` or ``box``, ``[noun]``)."""
    from fpr.tables import read_table, resolve_path

    p = Path(path)
    df = read_table(p, required=MANIFEST_COLUMNS, what="refvnli frames manifest")
    if "mask" not in df.columns and "box" not in df.columns:
        raise InputError("refvnli frames manifest lacks a 'mask' or 'box' column", where=str(p),
                         hint="mask: an image whose non-zero pixels are the subject; box: x0,y0,x1,y1 in pixels")
    base = p.parent
    out = []
    for i, row in df.iterrows():
        where = f"{p} row {int(i) + 2}"
        image = _read_rgb(resolve_path(row["path"], base))
        mask = _subject_mask(row, image, base, where)
        noun = str(row.get("noun", "") or row["entity"])
        out.append(rd.Frame(f"{row['set']}-{row['scene']}-{Path(row['path']).stem}", row["set"],
                            row["entity"], row["subject"], row["scene"], image, mask,
                            rd.Description(noun, _parse_details(row["details"], where))))
    return out


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


def _pair_scenes(scenes: list[tuple[str, str, list[Path]]], entity: str, root: Path) -> list[rd.Frame]:
    """Scenes (scene, subject, images) of one entity, sorted, in sets of two (an odd last one joins the last set).

    The subject mask is the whole image (a folder carries no masks): the crop is the frame itself, and
    the corruption patches fall anywhere in it. Prompts are ``a photo of <u>entity</u>``: with no details
    there is no changed-detail or swapped prompt (rule 4 leaves out a negative it cannot make)."""
    short = [f"{s[0]} ({len(s[2])})" for s in scenes if len(s[2]) < 2]
    if short:
        raise InputError(f"scenes with fewer than 2 images: {', '.join(short[:3])}", where=str(root),
                         hint="a positive pair needs two frames of a scene: add images or remove the folder")
    if len(scenes) < 2:
        raise InputError(f"entity '{entity}' has {len(scenes)} scene(s); a set needs 2", where=str(root),
                         hint="a negative pair needs a second scene of the same entity")
    n_sets = len(scenes) // 2
    out = []
    for k, (scene, subject, images) in enumerate(scenes):
        set_id = f"{entity}-set{min(k // 2, n_sets - 1):03d}"
        for path in images:
            image = _read_rgb(str(path))
            out.append(rd.Frame(f"{set_id}-{scene}-{path.stem}".replace("/", "-"), set_id, entity, subject, scene,
                                image, np.ones(image.shape[:2], bool), rd.Description(entity, ())))
    return out


def folder_frames(path: str | Path, entity: str | None = None) -> list[rd.Frame]:
    """Frames from a folder: ``<folder>/<identity>/*.png`` (one entity, named ``entity`` or after the folder;
    each identity one scene) or video frames ``<folder>/<scene>/<entity>/*.png`` (each scene's entity one
    subject; scenes of an entity paired into sets)."""
    root = Path(path).expanduser()
    images = sorted(Path(utf8_path(p, what="frame file name")) for p in root.rglob("*")
                    if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    depths = sorted({len(p.relative_to(root).parts) for p in images})
    if not images:
        raise InputError("no images in the folder", where=str(root),
                         hint="lay it out as <folder>/<identity>/*.png or <folder>/<scene>/<entity>/*.png")
    if len(depths) != 1 or depths[0] not in (2, 3):
        raise InputError(f"images at depths {depths} below the folder; expected all at 2 (<identity>/x.png) "
                         "or all at 3 (<scene>/<entity>/x.png)", where=str(root))
    groups: dict[tuple[str, ...], list[Path]] = {}
    for p in images:
        groups.setdefault(p.relative_to(root).parts[:-1], []).append(p)
    if depths[0] == 2:
        name = entity or root.name
        return _pair_scenes([(ident, ident, groups[(ident,)]) for (ident,) in sorted(groups)], name, root)
    by_entity: dict[str, list[tuple[str, str, list[Path]]]] = {}
    for scene, ent in sorted(groups):
        by_entity.setdefault(ent, []).append((scene, f"{scene}/{ent}", groups[(scene, ent)]))
    return [f for ent, scenes in sorted(by_entity.items()) for f in _pair_scenes(scenes, ent, root)]


def _png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image, "RGB").save(buf, format="PNG", compress_level=6)
    return buf.getvalue()


def triplet_table(triplets: list[rd.Triplet], frames: dict[str, rd.Frame],
                  corruptions: dict[str, rd.Corruption]) -> pd.DataFrame:
    """One row per triplet with paths relative to the output folder."""
    rows = []
    for n, t in enumerate(triplets):
        corrupted = t.target.endswith("#corrupted")
        base = t.target.split("#", 1)[0]
        rows.append({"triplet_id": f"t{n:07d}", "reference_path": f"crops/{safe_stem(t.reference)}.png",
                     "target_path": f"{'corrupted' if corrupted else 'frames'}/{safe_stem(base)}.png",
                     "prompt": t.prompt, "sp": t.sp, "ta": t.ta, "pair_kind": t.pair_kind,
                     "prompt_kind": t.prompt_kind, "prompt_source": t.prompt_source, "reference_frame": t.reference,
                     "target_frame": t.target, "entity": frames[base].entity,
                     "corruption_mse": round(corruptions[base].mse, 4) if corrupted else float("nan")})
    return pd.DataFrame(rows, columns=TRIPLET_COLUMNS)


@dataclass
class RefvnliData:
    """What :func:`build_refvnli_data` wrote."""

    out: Path
    manifest: Path
    triplets: int
    frames: int
    counts: dict  # "<pair_kind>/<prompt_kind>" -> triplets
    seconds: float

    def as_row(self) -> dict:
        return {"out": str(self.out), "manifest": str(self.manifest), "triplets": self.triplets,
                "frames": self.frames, "seconds": round(self.seconds, 2),
                **{k: v for k, v in sorted(self.counts.items())}}


def build_refvnli_data(out: str | Path, *, source: str = "world", world: WorldFrames | None = None,
                       settings: rd.Settings | None = None, manifest_format: str = "parquet",
                       overwrite: bool = False) -> RefvnliData:
    """Build labelled RefVNLI triplets (see :mod:`fpr.scorers.refvnli.data`) into the folder ``out``."""
    start = time.perf_counter()
    out = Path(out).expanduser()
    if manifest_format not in ("parquet", "csv"):
        raise InputError(f"manifest format must be parquet or csv, got '{manifest_format}'")
    settings = settings or rd.Settings()
    settings.check()
    if source == "world":
        world = world or WorldFrames(seed=settings.seed)
        world.check()
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise InputError("output folder is not empty", where=str(out), hint="choose a new folder or pass --overwrite")
    if source == "world":
        frames = world_frames(world)
        settings = replace(settings, slots={**world_slots(), **settings.slots})
        described = {"source": "world", **asdict(world)}
    elif Path(source).expanduser().is_dir():
        frames = folder_frames(source)
        described = {"source": "folder", "path": str(Path(source).expanduser().resolve())}
    else:
        frames = manifest_frames(source)
        described = {"source": "manifest", "path": str(Path(source).resolve())}
    triplets, corruptions = rd.build_triplets(frames, settings)
    by_id = {f.frame_id: f for f in frames}
    table = triplet_table(triplets, by_id, corruptions)
    counts = table.groupby(["pair_kind", "prompt_kind"]).size()
    counts = {f"{a}/{b}": int(v) for (a, b), v in counts.items()}
    card = {"format": DATA_FORMAT, "source": described,
            "settings": {k: v for k, v in asdict(settings).items() if k != "slots"},
            "slots": {k: list(v) for k, v in sorted(settings.slots.items())},
            "inpainting": "harmonic (Laplace) fill; the paper used a generative inpainter",
            "frames": len(frames), "triplets": len(table), "counts": counts,
            "manifest": f"triplets.{manifest_format}"}
    card["fingerprint"] = fingerprint(card)
    name = f"triplets.{manifest_format}"

    def fill(tmp: Path) -> None:
        for sub in ("frames", "crops", "corrupted"):
            (tmp / sub).mkdir()
        for f in frames:
            (tmp / "frames" / f"{safe_stem(f.frame_id)}.png").write_bytes(_png(f.image))
            box = rd.subject_box(f.mask, settings.box_margin)
            (tmp / "crops" / f"{safe_stem(f.frame_id)}.png").write_bytes(_png(rd.crop(f.image, box)))
            if f.frame_id in corruptions:
                (tmp / "corrupted" / f"{safe_stem(f.frame_id)}.png").write_bytes(_png(corruptions[f.frame_id].image))
        if manifest_format == "parquet":
            table.to_parquet(tmp / name, index=False)
        else:
            table.to_csv(tmp / name, index=False)
        (tmp / DATA_CARD).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")

    atomic_write_dir(out, fill, hint="choose an output folder in a writable place")
    return RefvnliData(out, out / name, len(table), len(frames), counts, time.perf_counter() - start)


__all__ = ["DATA_CARD", "DATA_FORMAT", "RefvnliData", "WorldFrames", "build_refvnli_data", "describe_view",
           "folder_frames", "manifest_frames", "triplet_table", "world_frames", "world_slots"]
