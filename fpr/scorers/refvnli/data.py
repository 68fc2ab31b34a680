"""RefVNLI's training data as rules: labelled <reference image, prompt, target image> triplets.

RefVNLI (Slobodkin et al., 2025, Sec. "training data") labels each triplet twice:
*subject preservation* (``sp``: is the reference's subject the target's subject?) and
*textual alignment* (``ta``: does the prompt describe the target?). The rules, as the
paper states them, and how this module implements each one:

1. **Scene pairs.** Frames come in *sets*: two scenes of the same *entity* (a class,
   e.g. a dog), each scene showing one *subject* (that dog) in two frames. Every frame
   in turn is cropped to its subject and is the reference; a full frame of the *same
   scene* (another frame of it) is a positive target, every full frame of the *other
   scene* a negative one. Two scenes of two frames give 4 positive and 8 negative
   pairs (:func:`scene_pairs`). A scene is one subject, so two scenes of one set must
   show different subjects (checked).
2. **Crops.** The reference is the frame cut to its subject's box, the box of the
   subject mask (:func:`subject_box`, :func:`crop`).
3. **Corruption hard negatives.** In a frame's subject mask, ``patches`` (5) patches
   are drawn at random; each is inpainted on its own, giving 5 altered versions; the
   one with the highest MSE between the altered and the original pixels is kept
   (:func:`corrupt`). (reference crop, corrupted frame) is a negative pair, (reference
   crop, original frame) a positive one (:func:`corruption_pairs`).
   *Variant:* the paper inpaints with a generative model; here the inpainting is the
   deterministic harmonic fill (:func:`harmonic_fill`: the masked pixels solve
   Laplace's equation with the surrounding pixels as boundary values), which erases
   the markings inside a patch -- the identity-defining pattern -- and needs no weights.
4. **Prompts.** For each pair, three prompts for the target: the *positive* prompt
   describes the target (``ta`` = 1); the *swapped* prompt is the description of
   another image of the same entity, one that differs from the target's (``ta`` = 0);
   the *changed-detail* prompt is the positive one with exactly one non-subject detail
   replaced (``ta`` = 0). The paper asks an LLM for descriptions; here a
   :class:`Description` (the subject noun and ordered detail slots such as setting,
   facing, light) is rendered by a fixed template (:func:`render_prompt`), the subject
   wrapped in ``<u>...</u>`` as the RefVNLI scorer expects.

Random choices (patches, which image's prompt is swapped in, which detail changes) come
from :func:`fpr.keys.keyed_rng` streams keyed by the seed and the image ids, so a build is
the same whatever else is built with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from fpr.errors import InputError
from fpr.keys import keyed_rng

OPEN, CLOSE = "<u>", "</u>"  # the subject markup the refvnli scorer reads


# --------------------------------------------------------------------------- records

@dataclass(frozen=True)
class Description:
    """What a positive prompt says about an image: the subject noun and ordered (slot, value) details."""

    subject: str
    details: tuple[tuple[str, str], ...]

    def value(self, slot: str) -> str:
        return dict(self.details)[slot]

    def with_detail(self, slot: str, value: str) -> "Description":
        return replace(self, details=tuple((s, value if s == slot else v) for s, v in self.details))


@dataclass(frozen=True)
class Frame:
    """One image of the source: which set, entity, subject and scene it belongs to, its pixels and subject mask."""

    frame_id: str
    set_id: str
    entity: str  # the class (zebra, dog): swapped prompts come from images of the same entity
    subject: str  # the individual; one per scene
    scene: str
    image: np.ndarray  # (H, W, 3) uint8
    mask: np.ndarray  # (H, W) bool: the subject's pixels
    description: Description


@dataclass(frozen=True)
class Pair:
    """A (reference crop, target image) pair with its subject-preservation label."""

    reference: str  # frame id whose crop is the reference
    target: str  # frame id (a corrupted target is ``<frame id>#corrupted``)
    sp: int
    kind: str  # scene-positive, scene-negative, corruption-positive, corruption-negative


@dataclass(frozen=True)
class Corruption:
    """One inpainted version of a frame: the patch (pixel box), its pixels and the MSE it caused there."""

    box: tuple[int, int, int, int]  # x0, y0, x1, y1 (exclusive)
    region: np.ndarray  # (H, W) bool: the pixels that were inpainted
    image: np.ndarray  # (H, W, 3) uint8
    mse: float  # mean over the region's pixels and channels of (altered - original)^2, 0-255 scale


@dataclass(frozen=True)
class Prompt:
    text: str
    ta: int
    kind: str  # positive, swapped, changed-detail
    source: str = ""  # swapped: the frame whose description it is; changed-detail: the slot changed


@dataclass(frozen=True)
class Triplet:
    reference: str
    target: str
    prompt: str
    sp: int
    ta: int
    pair_kind: str
    prompt_kind: str
    prompt_source: str = ""


@dataclass
class Settings:
    """The builder's knobs (defaults: the paper's 5 patches)."""

    seed: int = 0
    patches: int = 5
    patch_fraction: float = 0.3  # patch side as a share of the subject box's shorter side
    box_margin: float = 0.05  # crop margin as a share of the box side
    corruptions: bool = True
    slots: dict[str, tuple[str, ...]] = field(default_factory=dict)  # slot -> values a changed detail draws from

    def check(self) -> None:
        if self.patches < 1:
            raise InputError(f"patches must be >= 1, got {self.patches}")
        if not 0.0 < self.patch_fraction <= 1.0:
            raise InputError(f"patch fraction must be within (0, 1], got {self.patch_fraction}")
        if not 0.0 <= self.box_margin <= 1.0:
            raise InputError(f"box margin must be within [0, 1], got {self.box_margin}")


# --------------------------------------------------------------------------- rule 1: scene pairs

def check_sets(frames: list[Frame]) -> None:
    """Within a set: one entity, and each scene one subject that no other scene of the set shows."""
    by_set: dict[str, list[Frame]] = {}
    for f in frames:
        by_set.setdefault(f.set_id, []).append(f)
    ids = [f.frame_id for f in frames]
    if len(set(ids)) != len(ids):
        raise InputError("frame ids repeat", where=str(sorted({i for i in ids if ids.count(i) > 1})[:3]))
    for set_id, members in by_set.items():
        if len({f.entity for f in members}) != 1:
            raise InputError(f"set '{set_id}' mixes entities {sorted({f.entity for f in members})}",
                             hint="a set holds scenes of one entity (class)")
        subject_of: dict[str, set[str]] = {}
        for f in members:
            subject_of.setdefault(f.scene, set()).add(f.subject)
        if any(len(s) != 1 for s in subject_of.values()):
            raise InputError(f"a scene of set '{set_id}' shows more than one subject", hint="one subject per scene")
        subjects = [next(iter(s)) for s in subject_of.values()]
        if len(set(subjects)) != len(subjects):
            raise InputError(f"two scenes of set '{set_id}' show the same subject",
                             hint="their frames would be labelled negative: give each scene its own subject")


def scene_pairs(frames: list[Frame]) -> list[Pair]:
    """Every frame's crop against every other frame of its set: same scene positive, other scene negative."""
    check_sets(frames)
    out = []
    for ref in frames:
        for tgt in frames:
            if tgt.set_id != ref.set_id or tgt.frame_id == ref.frame_id:
                continue
            same = tgt.scene == ref.scene
            out.append(Pair(ref.frame_id, tgt.frame_id, int(same), "scene-positive" if same else "scene-negative"))
    return out


# --------------------------------------------------------------------------- rule 2: crops

def subject_box(mask: np.ndarray, margin: float = 0.0) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1), exclusive ends, of the mask's pixels, widened by ``margin`` of each side, clipped."""
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        raise InputError("the subject mask is empty", hint="every frame needs a visible subject")
    x0, x1, y0, y1 = int(xs.min()), int(xs.max()) + 1, int(ys.min()), int(ys.max()) + 1
    dx, dy = int(round(margin * (x1 - x0))), int(round(margin * (y1 - y0)))
    h, w = mask.shape
    return max(0, x0 - dx), max(0, y0 - dy), min(w, x1 + dx), min(h, y1 + dy)


def crop(image: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    x0, y0, x1, y1 = box
    return np.ascontiguousarray(image[y0:y1, x0:x1])


# --------------------------------------------------------------------------- rule 3: corruptions

def harmonic_fill(image: np.ndarray, region: np.ndarray) -> np.ndarray:
    """``image`` with the ``region`` pixels replaced by the harmonic interpolation of their surroundings.

    Each region pixel equals the mean of its 4-neighbours inside the image (Laplace's
    equation; the pixels outside the region are fixed). One sparse solve per channel:
    exact and deterministic. Every connected part of the region must touch a pixel
    outside it.
    """
    from scipy import sparse
    from scipy.sparse.linalg import spsolve

    h, w = region.shape
    ys, xs = np.nonzero(region)
    n = len(ys)
    if n == 0:
        return image.copy()
    if n == h * w:
        raise InputError("cannot inpaint a whole image", hint="use a smaller patch fraction")
    index = -np.ones((h, w), np.int64)
    index[ys, xs] = np.arange(n)
    img = image.astype(np.float64)
    rows, cols, vals = [], [], []
    rhs = np.zeros((n, img.shape[2]))
    degree = np.zeros(n)
    for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        ny, nx = ys + dy, xs + dx
        inside = (ny >= 0) & (ny < h) & (nx >= 0) & (nx < w)
        degree += inside
        k = np.nonzero(inside)[0]
        nb = index[ny[k], nx[k]]
        unknown = nb >= 0
        rows += [k[unknown]]
        cols += [nb[unknown]]
        vals += [-np.ones(int(unknown.sum()))]
        known = k[~unknown]
        rhs[known] += img[ny[known], nx[known]]
    a = sparse.csr_matrix((np.concatenate(vals + [degree]), (np.concatenate(rows + [np.arange(n)]),
                                                             np.concatenate(cols + [np.arange(n)]))), shape=(n, n))
    solution = spsolve(a.tocsc(), rhs)
    solution = solution.reshape(n, -1)
    if not np.all(np.isfinite(solution)):
        raise InputError("a patch to inpaint does not touch any pixel outside it", hint="use a smaller patch")
    out = image.copy()
    out[ys, xs] = np.clip(np.rint(solution), 0, 255).astype(np.uint8)
    return out


def patch_region(mask: np.ndarray, centre: tuple[int, int], side: int) -> tuple[tuple[int, int, int, int], np.ndarray]:
    """The square of ``side`` pixels around ``centre`` (y, x), clipped to the image, intersected with the mask."""
    h, w = mask.shape
    cy, cx = centre
    y0, x0 = max(0, cy - side // 2), max(0, cx - side // 2)
    y1, x1 = min(h, y0 + side), min(w, x0 + side)
    region = np.zeros_like(mask, dtype=bool)
    region[y0:y1, x0:x1] = mask[y0:y1, x0:x1]
    return (x0, y0, x1, y1), region


def region_mse(a: np.ndarray, b: np.ndarray, region: np.ndarray) -> float:
    """Mean squared difference over the region's pixels and channels (0-255 scale); 0 for an empty region."""
    if not region.any():
        return 0.0
    d = a[region].astype(np.float64) - b[region].astype(np.float64)
    return float(np.mean(d * d))


def corruption_candidates(frame: Frame, settings: Settings) -> list[Corruption]:
    """``settings.patches`` inpainted versions of the frame, one patch each, centres drawn in the subject mask."""
    rng = keyed_rng("refvnli-corrupt", settings.seed, frame.frame_id)
    x0, y0, x1, y1 = subject_box(frame.mask)
    side = max(2, int(round(settings.patch_fraction * min(x1 - x0, y1 - y0))))
    ys, xs = np.nonzero(frame.mask)
    out = []
    for j in rng.choice(len(ys), size=settings.patches, replace=len(ys) < settings.patches):
        box, region = patch_region(frame.mask, (int(ys[j]), int(xs[j])), side)
        altered = harmonic_fill(frame.image, region)
        out.append(Corruption(box, region, altered, region_mse(altered, frame.image, region)))
    return out


def pick_corruption(candidates: list[Corruption]) -> Corruption:
    """The version with the highest MSE (the first of equals)."""
    if not candidates:
        raise InputError("no corrupted versions to choose from")
    return candidates[int(np.argmax([c.mse for c in candidates]))]


def corrupt(frame: Frame, settings: Settings) -> Corruption:
    return pick_corruption(corruption_candidates(frame, settings))


def corrupted_id(frame_id: str) -> str:
    return f"{frame_id}#corrupted"


def corruption_pairs(frames: list[Frame]) -> list[Pair]:
    """Per frame: (its crop, the frame) positive and (its crop, its corrupted version) negative."""
    out = []
    for f in frames:
        out.append(Pair(f.frame_id, f.frame_id, 1, "corruption-positive"))
        out.append(Pair(f.frame_id, corrupted_id(f.frame_id), 0, "corruption-negative"))
    return out


# --------------------------------------------------------------------------- rule 4: prompts

_SLOT_TEMPLATES = {"facing": "facing {}", "light": "in {} light"}  # other slots are written as they are


def render_prompt(d: Description) -> str:
    """``a photo of <u>zebra</u> facing left, partly hidden, in dim light, in the snow``."""
    parts = [_SLOT_TEMPLATES.get(slot, "{}").format(value) for slot, value in d.details]
    return f"a photo of {OPEN}{d.subject}{CLOSE} " + ", ".join(parts) if parts else f"a photo of {OPEN}{d.subject}{CLOSE}"


def swapped_prompt(target: Frame, frames: list[Frame], seed: int) -> Prompt | None:
    """The description of another image of the same entity whose prompt differs from the target's; None if none."""
    own = render_prompt(target.description)
    candidates = sorted((f for f in frames if f.entity == target.entity and f.frame_id != target.frame_id
                         and render_prompt(f.description) != own), key=lambda f: f.frame_id)
    if not candidates:
        return None
    pick = candidates[int(keyed_rng("refvnli-swap", seed, target.frame_id).integers(len(candidates)))]
    return Prompt(render_prompt(pick.description), 0, "swapped", pick.frame_id)


def changed_detail_prompt(target: Frame, slots: dict[str, tuple[str, ...]], seed: int) -> Prompt | None:
    """The target's description with one detail (a slot with another value to take) replaced; None if none can change."""
    d = target.description
    changeable = [(s, v) for s, v in d.details if any(alt != v for alt in slots.get(s, ()))]
    if not changeable:
        return None
    rng = keyed_rng("refvnli-detail", seed, target.frame_id)
    slot, value = changeable[int(rng.integers(len(changeable)))]
    alternatives = [alt for alt in slots[slot] if alt != value]
    new = alternatives[int(rng.integers(len(alternatives)))]
    return Prompt(render_prompt(d.with_detail(slot, new)), 0, "changed-detail", slot)


def slot_values(frames: list[Frame]) -> dict[str, tuple[str, ...]]:
    """Every value each detail slot takes in the frames (sorted): what a changed detail can become."""
    seen: dict[str, set[str]] = {}
    for f in frames:
        for slot, value in f.description.details:
            seen.setdefault(slot, set()).add(value)
    return {s: tuple(sorted(v)) for s, v in seen.items()}


def prompts_for(target: Frame, frames: list[Frame], settings: Settings) -> list[Prompt]:
    """Positive, swapped and changed-detail prompts for one target (a negative that cannot be made is left out)."""
    slots = {**slot_values(frames), **settings.slots}
    out = [Prompt(render_prompt(target.description), 1, "positive")]
    out += [p for p in (swapped_prompt(target, frames, settings.seed),
                        changed_detail_prompt(target, slots, settings.seed)) if p is not None]
    return out


# --------------------------------------------------------------------------- everything

def build_triplets(frames: list[Frame], settings: Settings) -> tuple[list[Triplet], dict[str, Corruption]]:
    """All triplets (every pair x its target's prompts) and the kept corruption of each frame."""
    settings.check()
    by_id = {f.frame_id: f for f in frames}
    pairs = scene_pairs(frames)
    corruptions: dict[str, Corruption] = {}
    if settings.corruptions:
        pairs += corruption_pairs(frames)
        corruptions = {f.frame_id: corrupt(f, settings) for f in frames}
    prompts = {f.frame_id: prompts_for(f, frames, settings) for f in frames}
    triplets = []
    for p in pairs:
        base = p.target.split("#", 1)[0]  # a corrupted target keeps its frame's description
        for q in prompts[by_id[base].frame_id]:
            triplets.append(Triplet(p.reference, p.target, q.text, p.sp, q.ta, p.kind, q.kind, q.source))
    return triplets, corruptions


__all__ = ["Corruption", "Description", "Frame", "Pair", "Prompt", "Settings", "Triplet", "build_triplets",
           "changed_detail_prompt", "check_sets", "corrupt", "corrupted_id", "corruption_candidates",
           "corruption_pairs", "crop", "harmonic_fill", "patch_region", "pick_corruption", "prompts_for",
           "region_mse", "render_prompt", "scene_pairs", "slot_values", "subject_box", "swapped_prompt"]
