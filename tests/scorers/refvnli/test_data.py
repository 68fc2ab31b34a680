"""RefVNLI triplet rules on small hand-made frames: pairs, crops, corruptions, prompts, determinism."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fpr.errors import InputError
from fpr.scorers.refvnli import data as rd
from fpr.workflows import refvnli as wr

ROOT = Path(__file__).resolve().parents[3]


def _frame(fid, scene, subject, *, set_id="s0", entity="dog", details=(("setting", "on grass"),), image=None,
           mask=None) -> rd.Frame:
    image = np.full((12, 12, 3), 100, np.uint8) if image is None else image
    if mask is None:
        mask = np.zeros((12, 12), bool)
        mask[3:9, 2:10] = True
    return rd.Frame(fid, set_id, entity, subject, scene, image, mask, rd.Description(entity, tuple(details)))


def _quad():
    """Two scenes (dog A, dog B) of two frames each: the paper's unit."""
    return [_frame("a1", "A", "dogA"), _frame("a2", "A", "dogA"), _frame("b1", "B", "dogB"), _frame("b2", "B", "dogB")]


# --------------------------------------------------------------------------- scene pairs

def test_two_scenes_of_two_frames_give_4_positive_and_8_negative_pairs():
    pairs = rd.scene_pairs(_quad())
    pos = {(p.reference, p.target) for p in pairs if p.sp == 1}
    neg = {(p.reference, p.target) for p in pairs if p.sp == 0}
    assert pos == {("a1", "a2"), ("a2", "a1"), ("b1", "b2"), ("b2", "b1")}
    assert neg == {(r, t) for r in ("a1", "a2") for t in ("b1", "b2")} | {(r, t) for r in ("b1", "b2")
                                                                          for t in ("a1", "a2")}
    assert len(pairs) == 12 and all(p.reference != p.target for p in pairs)
    assert {p.kind for p in pairs if p.sp} == {"scene-positive"} and {p.kind for p in pairs if not p.sp} == {
        "scene-negative"}


def test_pairs_never_cross_sets():
    frames = _quad() + [_frame("c1", "C", "dogC", set_id="s1"), _frame("c2", "C", "dogC", set_id="s1"),
                        _frame("d1", "D", "dogD", set_id="s1")]
    pairs = rd.scene_pairs(frames)
    s1 = {"c1", "c2", "d1"}
    assert all((p.reference in s1) == (p.target in s1) for p in pairs)
    assert Counter(p.sp for p in pairs if p.reference in s1) == {1: 2, 0: 4}


def test_two_scenes_of_one_subject_in_a_set_are_refused():
    frames = _quad()[:2] + [_frame("b1", "B", "dogA"), _frame("b2", "B", "dogA")]
    with pytest.raises(InputError, match="same subject"):
        rd.scene_pairs(frames)


def test_a_set_of_two_entities_and_a_scene_of_two_subjects_are_refused():
    with pytest.raises(InputError, match="mixes entities"):
        rd.scene_pairs(_quad()[:3] + [_frame("b2", "B", "dogB", entity="cat")])
    with pytest.raises(InputError, match="more than one subject"):
        rd.scene_pairs(_quad()[:3] + [_frame("b2", "B", "dogC")])


# --------------------------------------------------------------------------- crops

def test_subject_box_is_the_mask_bounds_with_margin_clipped():
    mask = np.zeros((10, 20), bool)
    mask[2:6, 5:15] = True  # 10 wide, 4 high
    assert rd.subject_box(mask) == (5, 2, 15, 6)
    assert rd.subject_box(mask, 0.25) == (3, 1, 17, 7)  # 0.25 * 10 = 2.5 -> 2 (round half to even), 0.25 * 4 = 1
    assert rd.subject_box(mask, 1.0) == (0, 0, 20, 10)
    assert rd.crop(np.arange(10 * 20 * 3).reshape(10, 20, 3), (5, 2, 15, 6)).shape == (4, 10, 3)
    with pytest.raises(InputError, match="mask is empty"):
        rd.subject_box(np.zeros((4, 4), bool))


# --------------------------------------------------------------------------- corruptions

def test_harmonic_fill_reproduces_a_linear_ramp_and_a_constant():
    x = np.arange(16, dtype=np.uint8) * 10
    ramp = np.repeat(np.broadcast_to(x, (16, 16))[..., None], 3, axis=2).copy()
    region = np.zeros((16, 16), bool)
    region[4:11, 3:12] = True
    assert np.array_equal(rd.harmonic_fill(ramp, region), ramp)  # a linear function is harmonic
    flat = np.full((8, 8, 3), 77, np.uint8)
    assert np.array_equal(rd.harmonic_fill(flat, region[:8, :8]), flat)


def test_harmonic_fill_of_one_pixel_is_the_mean_of_its_four_neighbours():
    img = np.zeros((3, 3, 3), np.uint8)
    img[0, 1], img[2, 1], img[1, 0], img[1, 2], img[1, 1] = 10, 20, 30, 41, 255
    region = np.zeros((3, 3), bool)
    region[1, 1] = True
    out = rd.harmonic_fill(img, region)
    assert out[1, 1].tolist() == [25, 25, 25]  # (10 + 20 + 30 + 41) / 4 = 25.25
    assert np.array_equal(np.delete(out.reshape(9, 3), 4, axis=0), np.delete(img.reshape(9, 3), 4, axis=0))
    # two pixels in a row: u1 = (a + b + c + u2) / 4, u2 = (d + e + f + u1) / 4 solved by hand
    img2 = np.zeros((3, 4, 3), np.uint8)
    img2[0, 1], img2[2, 1], img2[1, 0] = 40, 40, 40  # around (1, 1): sum 120
    img2[0, 2], img2[2, 2], img2[1, 3] = 0, 0, 0  # around (1, 2): sum 0
    two = np.zeros((3, 4), bool)
    two[1, 1:3] = True
    out2 = rd.harmonic_fill(img2, two)
    # 4 u1 - u2 = 120, 4 u2 - u1 = 0  ->  u1 = 32, u2 = 8
    assert out2[1, 1, 0] == 32 and out2[1, 2, 0] == 8


def test_region_mse_by_hand():
    a = np.zeros((2, 2, 3), np.uint8)
    b = a.copy()
    b[0, 0] = (3, 0, 0)
    b[1, 1] = (255, 255, 255)
    region = np.array([[True, False], [False, False]])
    assert rd.region_mse(a, b, region) == pytest.approx(9 / 3)
    assert rd.region_mse(a, b, np.ones((2, 2), bool)) == pytest.approx((9 + 3 * 255 ** 2) / 12)
    assert rd.region_mse(a, b, np.zeros((2, 2), bool)) == 0.0


def _half_striped() -> rd.Frame:
    """Subject mask over the whole 24x24 frame; left half flat, right half vertical 0/255 stripes."""
    img = np.full((24, 24, 3), 128, np.uint8)
    img[:, 12:] = np.where((np.arange(12) % 2 == 0)[None, :, None], 255, 0)
    return _frame("x", "A", "dogA", image=img, mask=np.ones((24, 24), bool))


def test_the_kept_corruption_is_the_highest_mse_candidate():
    frame = _half_striped()
    settings = rd.Settings(seed=3, patches=5, patch_fraction=0.2)
    cands = rd.corruption_candidates(frame, settings)
    assert len(cands) == 5
    for c in cands:  # each candidate: its own patch inpainted, nothing else touched, MSE recomputed independently
        assert np.array_equal(c.image[~c.region], frame.image[~c.region])
        diff = [float(v) for v in (c.image[c.region].astype(float) - frame.image[c.region]).ravel()]
        assert c.mse == pytest.approx(sum(d * d for d in diff) / len(diff))
    kept = rd.corrupt(frame, settings)
    assert kept.mse == max(c.mse for c in cands) and np.array_equal(kept.image, cands[
        int(np.argmax([c.mse for c in cands]))].image)
    assert rd.pick_corruption([rd.Corruption((0, 0, 1, 1), None, None, 1.0),
                               rd.Corruption((0, 0, 2, 2), None, None, 5.0),
                               rd.Corruption((0, 0, 3, 3), None, None, 5.0)]).box == (0, 0, 2, 2)


def test_with_enough_patches_the_kept_one_lies_on_the_stripes():
    frame = _half_striped()
    kept = rd.corrupt(frame, rd.Settings(seed=0, patches=30, patch_fraction=0.2))
    assert kept.box[0] >= 8 and kept.mse > 1000  # the flat half gives MSE 0 (harmonic fill of a constant)


def test_patches_lie_within_the_subject_mask():
    img = (np.arange(20 * 20 * 3) % 251).astype(np.uint8).reshape(20, 20, 3)
    mask = np.zeros((20, 20), bool)
    mask[5:15, 8:16] = True
    frame = _frame("m", "A", "dogA", image=img, mask=mask)
    for c in rd.corruption_candidates(frame, rd.Settings(patches=8, patch_fraction=0.5)):
        assert c.region.any() and not (c.region & ~mask).any()
        assert np.array_equal(c.image[~mask], img[~mask])


def test_corruption_pairs_per_frame():
    pairs = rd.corruption_pairs(_quad()[:1])
    assert pairs == [rd.Pair("a1", "a1", 1, "corruption-positive"), rd.Pair("a1", "a1#corrupted", 0,
                                                                            "corruption-negative")]


# --------------------------------------------------------------------------- prompts

def _described(fid, entity, **details):
    return _frame(fid, fid, fid, entity=entity, details=tuple(details.items()))


def test_positive_prompt_describes_the_target_with_the_subject_marked():
    f = _described("f", "zebra", facing="left", light="dim", setting="in the snow")
    assert rd.render_prompt(f.description) == "a photo of <u>zebra</u> facing left, in dim light, in the snow"
    assert rd.render_prompt(rd.Description("dog", ())) == "a photo of <u>dog</u>"


def test_swapped_prompt_comes_from_another_image_of_the_same_entity_with_a_different_description():
    t = _described("t", "dog", setting="on grass")
    same_text = _described("u", "dog", setting="on grass")
    other = _described("v", "dog", setting="on a beach")
    cat = _described("w", "cat", setting="in the snow")
    for seed in range(10):
        p = rd.swapped_prompt(t, [t, same_text, other, cat], seed)
        assert p.source == "v" and p.ta == 0 and p.text == rd.render_prompt(other.description)
    assert rd.swapped_prompt(t, [t, same_text, cat], 0) is None  # nothing of the same entity says otherwise
    picks = {rd.swapped_prompt(t, [t] + [_described(f"d{i}", "dog", setting=f"s{i}") for i in range(6)], s).source
             for s in range(40)}
    assert len(picks) > 1  # the pick is drawn, not always the first


def test_changed_detail_prompt_changes_exactly_one_slot_to_another_known_value():
    t = _described("t", "dog", facing="left", light="dim", setting="on grass")
    slots = {"facing": ("left", "right"), "light": ("dim", "soft", "bright"), "setting": ("on grass",)}
    seen = set()
    for seed in range(30):
        p = rd.changed_detail_prompt(t, slots, seed)
        d = dict(t.description.details)
        changed = [s for s in d if rd.render_prompt(t.description.with_detail(s, "?")) != p.text and
                   any(rd.render_prompt(t.description.with_detail(s, v)) == p.text for v in slots[s])]
        assert changed == [p.source] and p.ta == 0 and p.kind == "changed-detail"
        seen.add(p.source)
    assert seen == {"facing", "light"}  # "setting" has no other value to take
    assert rd.changed_detail_prompt(t, {"setting": ("on grass",)}, 0) is None


def test_triplet_labels_combine_the_pair_and_the_prompt():
    frames = [_frame(f, s, sub, details=(("light", li),)) for f, s, sub, li in
              (("a1", "A", "dogA", "dim"), ("a2", "A", "dogA", "soft"), ("b1", "B", "dogB", "dim"),
               ("b2", "B", "dogB", "bright"))]
    triplets, corruptions = rd.build_triplets(frames, rd.Settings(patches=2))
    assert set(corruptions) == {"a1", "a2", "b1", "b2"}
    count = Counter((t.pair_kind, t.prompt_kind, t.sp, t.ta) for t in triplets)
    assert count == {("scene-positive", "positive", 1, 1): 4, ("scene-positive", "swapped", 1, 0): 4,
                     ("scene-positive", "changed-detail", 1, 0): 4, ("scene-negative", "positive", 0, 1): 8,
                     ("scene-negative", "swapped", 0, 0): 8, ("scene-negative", "changed-detail", 0, 0): 8,
                     ("corruption-positive", "positive", 1, 1): 4, ("corruption-positive", "swapped", 1, 0): 4,
                     ("corruption-positive", "changed-detail", 1, 0): 4,
                     ("corruption-negative", "positive", 0, 1): 4, ("corruption-negative", "swapped", 0, 0): 4,
                     ("corruption-negative", "changed-detail", 0, 0): 4}
    for t in triplets:  # a positive prompt describes the target (a corrupted target keeps its description)
        target = next(f for f in frames if f.frame_id == t.target.split("#")[0])
        assert (t.prompt == rd.render_prompt(target.description)) == (t.prompt_kind == "positive")


# --------------------------------------------------------------------------- world source and the folder

def test_world_frames_scene_keeps_background_and_light_and_uses_training_identities():
    from fpr.galleries.world import TRAIN_RANGE, parse_identity

    frames = wr.world_frames(wr.WorldFrames(species=("leopard",), sets=1, size=64))
    assert len(frames) == 4 and len({f.scene for f in frames}) == 2 and len({f.subject for f in frames}) == 2
    assert all(parse_identity(f.subject)[1] in TRAIN_RANGE for f in frames)
    for scene in {f.scene for f in frames}:
        a, b = [f for f in frames if f.scene == scene]
        assert a.description.value("setting") == b.description.value("setting")
        assert a.description.value("light") == b.description.value("light")
        assert not np.array_equal(a.image, b.image) and a.mask.sum() > 200


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_build_is_deterministic_per_seed(tmp_path):
    world = wr.WorldFrames(species=("zebra",), sets=1, size=64)
    one = wr.build_refvnli_data(tmp_path / "a", world=world)
    two = wr.build_refvnli_data(tmp_path / "b", world=world)
    assert _digest(one.out) == _digest(two.out) and one.triplets == 60
    other = wr.build_refvnli_data(tmp_path / "c", world=wr.WorldFrames(species=("zebra",), sets=1, size=64, seed=1),
                                  settings=rd.Settings(seed=1))
    assert _digest(other.out) != _digest(one.out)
    table = pd.read_parquet(one.manifest)
    assert all((one.out / p).is_file() for p in pd.concat([table.reference_path, table.target_path]))
    neg = table[table.pair_kind == "corruption-negative"]
    assert neg.target_path.str.startswith("corrupted/").all() and (neg.corruption_mse > 0).all()


def test_a_manifest_of_masked_frames(tmp_path):
    rows = []
    for scene, subject in (("A", "rex"), ("B", "fido")):
        for k in range(2):
            img = np.random.default_rng(len(rows)).integers(0, 255, (16, 16, 3), dtype=np.uint8)
            mask = np.zeros((16, 16), np.uint8)
            mask[4:12, 4:12] = 255
            Image.fromarray(img).save(tmp_path / f"{scene}{k}.png")
            Image.fromarray(mask).save(tmp_path / f"{scene}{k}.mask.png")
            rows.append({"path": f"{scene}{k}.png", "mask": f"{scene}{k}.mask.png", "entity": "dog",
                         "subject": subject, "scene": scene, "set": "s0",
                         "details": f"setting={'on grass' if k else 'on a beach'};light=dim"})
    pd.DataFrame(rows).to_csv(tmp_path / "frames.csv", index=False)
    res = wr.build_refvnli_data(tmp_path / "out", source=str(tmp_path / "frames.csv"), manifest_format="csv")
    table = pd.read_csv(res.manifest)
    assert res.frames == 4 and len(table) == 60
    assert set(table[table.prompt_kind == "positive"].prompt) == {
        "a photo of <u>dog</u> on a beach, in dim light", "a photo of <u>dog</u> on grass, in dim light"}
    # a box instead of a mask: the box is the subject (crop and patches from it)
    boxed = [{**r, "mask": "", "box": "4,4,12,12"} for r in rows]
    pd.DataFrame(boxed).to_csv(tmp_path / "boxed.csv", index=False)
    frames = wr.manifest_frames(tmp_path / "boxed.csv")
    masked = wr.manifest_frames(tmp_path / "frames.csv")
    assert all(np.array_equal(a.mask, b.mask) for a, b in zip(frames, masked))
    for bad, needle in (({"details": "setting"}, "slot=value"), ({"box": "4,4,40,12"}, "outside the 16x16 image"),
                        ({"box": "a,b"}, "box must be 'x0,y0,x1,y1'"), ({"box": ""}, "needs a subject mask or box")):
        broken = [dict(r) for r in boxed]
        broken[1].update(bad)
        pd.DataFrame(broken).to_csv(tmp_path / "bad.csv", index=False)
        with pytest.raises(InputError, match=needle):
            wr.build_refvnli_data(tmp_path / "out2", source=str(tmp_path / "bad.csv"))
    pd.DataFrame(rows).drop(columns=["mask"]).to_csv(tmp_path / "nomask.csv", index=False)
    with pytest.raises(InputError, match="lacks a 'mask' or 'box' column"):
        wr.manifest_frames(tmp_path / "nomask.csv")


def test_cli_builds_and_bad_input_is_one_line(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    run = [sys.executable, "-m", "fpr", "refvnli", "data", "--out", str(tmp_path / "o"), "--species", "giraffe",
           "--sets", "1", "--size", "64", "--format", "json"]
    ok = subprocess.run(run, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert '"triplets": 60' in ok.stdout
    bad = subprocess.run(run[:-6] + ["--species", "cat", "--out", str(tmp_path / "p")], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown world species 'cat'" in bad.stderr


# --------------------------------------------------------------------------- folder sources

def _noise(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(path)


def test_identity_folders_pair_into_sets_and_build(tmp_path):
    root = tmp_path / "dogs"
    for i, ident in enumerate(["a", "b", "c"]):  # three identities: one set of 3 scenes (no identity left out)
        for k in range(2):
            _noise(root / ident / f"{k}.png", 10 * i + k)
    frames = wr.folder_frames(root)
    assert {f.entity for f in frames} == {"dogs"} and {f.set_id for f in frames} == {"dogs-set000"}
    assert sorted({(f.scene, f.subject) for f in frames}) == [("a", "a"), ("b", "b"), ("c", "c")]
    assert all(f.mask.all() and f.mask.shape == (40, 48) for f in frames)
    res = wr.build_refvnli_data(tmp_path / "out", source=str(root))
    t = pd.read_parquet(res.manifest)
    # 6 frames: each crop vs 5 others (1 same scene, 4 other scenes) -> 6 positive + 24 negative scene pairs,
    # 6 + 6 corruption pairs; one prompt each (no details: no swapped or changed-detail prompt)
    assert res.counts == {"scene-positive/positive": 6, "scene-negative/positive": 24,
                          "corruption-positive/positive": 6, "corruption-negative/positive": 6}
    assert set(t.prompt) == {"a photo of <u>dogs</u>"}
    assert json.loads((tmp_path / "out" / "refvnli-data.json").read_text())["source"]["source"] == "folder"


def test_video_folders_make_one_subject_per_scene_and_entity(tmp_path):
    root = tmp_path / "video"
    for s, scene in enumerate(["s1", "s2", "s3", "s4"]):
        for e, entity in enumerate(["cat", "dog"]):
            for k in range(2):
                _noise(root / scene / entity / f"f{k}.png", 100 * s + 10 * e + k)
    frames = wr.folder_frames(root)
    sets = Counter((f.entity, f.set_id) for f in frames)
    assert sets == {("cat", "cat-set000"): 4, ("cat", "cat-set001"): 4, ("dog", "dog-set000"): 4,
                    ("dog", "dog-set001"): 4}
    assert {f.subject for f in frames if f.set_id == "cat-set000"} == {"s1/cat", "s2/cat"}
    rd.check_sets(frames)


def test_bad_folders_are_one_line(tmp_path):
    with pytest.raises(InputError, match="no images"):
        wr.folder_frames(tmp_path)
    _noise(tmp_path / "a" / "0.png", 1)
    _noise(tmp_path / "b" / "0.png", 2)
    _noise(tmp_path / "b" / "1.png", 3)
    with pytest.raises(InputError, match=r"fewer than 2 images: a \(1\)"):
        wr.folder_frames(tmp_path)
    _noise(tmp_path / "x" / "y" / "z.png", 4)
    with pytest.raises(InputError, match="depths"):
        wr.folder_frames(tmp_path)
