"""The world's method set: contexts crossed with drift levels, the copy controls, the names of
earlier world versions, the declared truth per method, and named profiles of real methods."""
from __future__ import annotations

from dataclasses import dataclass

# Contexts: where a graded generation puts the subject. The paper's generations vary the scene ("on a
# beach", "lying down"); the failure its appendix C describes for IP-Adapter-Plus keeps the reference's
# layout and background and loses the markings. Crossing context with drift lets context confound Sim.
CONTEXTS = ("new-scene", "ref-pose", "ref-scene")
# new-scene: a novel view (pose, size, position, lighting) on a background family no real image has;
# ref-pose:  the reference image's pose and framing (its layout) on a novel background, new lighting;
# ref-scene: the reference image's whole scene (pose, background, lighting, occluder), new sensor noise.
COPY_CONTEXT = "copy"  # the copy controls: a reference image's own pixels, moved or re-backgrounded
DRIFT_LEVELS = (0.0, 0.1, 0.25, 0.5, 1.0)  # share of the markings redrawn; 1 = another individual


def method_name(context: str, drift: float) -> str:
    """The graded method that renders ``drift`` in ``context``: e.g. ``new-scene@0.25``, ``ref-pose@1``."""
    return f"{context}@{float(drift):g}"


GRADED_METHODS = tuple(method_name(c, d) for c in CONTEXTS for d in DRIFT_LEVELS)
# Copy controls: reproduce a reference image (its pixels, its pose) instead of re-rendering the subject.
COPY_METHODS = ("paste", "paste-mirror", "paste-rescale", "edit")
METHODS = GRADED_METHODS + COPY_METHODS
# Names of world versions 1-2, still accepted: the same images as their target (the view is keyed by
# the target), the rows keep the name asked for.
METHOD_ALIASES = {"faithful": "new-scene@0", "drift-0.1": "new-scene@0.1", "drift-0.25": "new-scene@0.25",
                  "drift-0.5": "new-scene@0.5", "generic": "new-scene@1", "near-copy": "ref-scene@0.25"}
# The declared ground-truth drift is identity-wise: a copy of a reference image (paste, paste-mirror,
# paste-rescale, edit) shows the identity's own markings unchanged, so 0; a graded method's drift is the
# share of the markings it redraws, whatever its context. That copies and reference layouts are not novel
# generations is the copy-paste scorer's business, not the drift truth's (docs/world.md).
METHOD_CONTEXT = {**{m: m.split("@")[0] for m in GRADED_METHODS}, **{m: COPY_CONTEXT for m in COPY_METHODS}}
METHOD_DRIFT = {**{m: float(m.split("@")[1]) for m in GRADED_METHODS}, **{m: 0.0 for m in COPY_METHODS}}
METHOD_CONTEXT.update({a: METHOD_CONTEXT[t] for a, t in METHOD_ALIASES.items()})
METHOD_DRIFT.update({a: METHOD_DRIFT[t] for a, t in METHOD_ALIASES.items()})


@dataclass(frozen=True)
class Profile:
    """A simulated real method: per query, one graded method drawn with these weights (they sum to 1)."""

    name: str
    mixture: tuple[tuple[str, float], ...]  # (graded method, probability)
    paper: str  # what the Finer-Personalization Rank paper says of the method it imitates

    @property
    def drift(self) -> float:
        """Expected drift of a query."""
        return float(sum(METHOD_DRIFT[m] * w for m, w in self.mixture))


PROFILES = {p.name: p for p in (
    Profile("dreambooth-like", (("new-scene@0", 0.5), ("new-scene@0.1", 0.3), ("new-scene@0.25", 0.2)),
            "fine-tuned on 3-5 images; the best identity preservation and instruction following of the 7 "
            "methods, the identity-specific spots and stripes kept in new scenes (Sec. 4, App. C, Fig. 9)"),
    Profile("ip-adapter-plus-like", (("ref-scene@0.5", 0.35), ("ref-scene@1", 0.15), ("ref-pose@0.5", 0.3),
                                     ("ref-pose@1", 0.1), ("new-scene@0.5", 0.1)),
            "often a nearly identical background and a similar layout to the reference, yet the animals' "
            "patterns lost; the highest CLIP-I/DINO Sim on leopards (0.913/0.825, Table 5) (App. C)"),
    Profile("emu2-like", (("ref-pose@0.25", 0.3), ("ref-pose@0.5", 0.3), ("new-scene@0.25", 0.2),
                          ("new-scene@0.5", 0.2)),
            "sometimes does not follow the personalization instruction; strong semantic similarity to the "
            "subject but lacking identity-specific detail, scored high by CLIP and DINO (App. C)"),
    Profile("ominicontrol-like", (("new-scene@0.5", 0.4), ("new-scene@1", 0.6)),
            "new scenes, identity mostly lost: the lowest CLIP-I/DINO Sim and MiewID mAP on leopards "
            "(0.775/0.646 and 0.218, Table 5); zero-shot methods preserve identity less well (Sec. 2)"),
)}
"""Named profiles (:class:`Profile`): mixtures of contexts and drift levels that behave the way the paper's
appendix C and Table 5 describe real methods. A profile is requested like a method
(``WorldConfig(profiles=("dreambooth-like",))``); its rows carry ``method`` and ``profile`` = its name and
the drawn query's ``context`` and ``drift``."""


def declared_drift(method: str) -> float | None:
    """The drift a method declares: its own for a graded method, copy or old name, the expected drift of a
    profile's draw (:attr:`Profile.drift`), None for anything else (the oracle)."""
    if method in METHOD_DRIFT:
        return METHOD_DRIFT[method]
    return PROFILES[method].drift if method in PROFILES else None
