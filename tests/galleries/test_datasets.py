"""Dataset importers (CUB-200-2011, Stanford Cars, WildlifeReID-10k) and the paper's presets, on tiny trees."""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from fpr.cli.main import cli
from fpr.errors import InputError
from fpr.galleries.curate import curate
from fpr.galleries.datasets import build_preset, read_cub, read_stanford_cars, read_wildlife_reid10k
from fpr.galleries.datasets.presets import CARS_PAPER_MODELS, CUB_GROUPS, n_references, select_sedans

_counter = [0]


def tiny_png(path: Path) -> Path:
    """A distinct 8x8 image (distinct bytes, so de-duplication keeps it)."""
    _counter[0] += 1
    rng = np.random.default_rng(_counter[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(path)
    return path


# --------------------------------------------------------------------------- CUB

CUB_NAMES = {113: "Baird_Sparrow", 114: "Black_throated_Sparrow", 115: "Brewer_Sparrow", 116: "Chipping_Sparrow",
             117: "Clay_colored_Sparrow", 143: "Caspian_Tern", 144: "Common_Tern", 145: "Elegant_Tern",
             146: "Forsters_Tern", 147: "Least_Tern", 193: "Bewick_Wren", 194: "Cactus_Wren", 195: "Carolina_Wren",
             196: "House_Wren", 197: "Marsh_Wren"}


def make_cub(root: Path, per_class: int = 22, extra_classes=(1, 2)) -> Path:
    cub = root / "CUB_200_2011"
    (cub / "images").mkdir(parents=True)
    classes = [f"{cid} {cid:03d}.{CUB_NAMES.get(cid, f'Bird_{cid}')}" for cid in range(1, 201)]
    (cub / "classes.txt").write_text("\n".join(classes) + "\n")
    images, labels, split = [], [], []
    iid = 0
    for cid in [*extra_classes, *CUB_NAMES]:
        folder = f"{cid:03d}.{CUB_NAMES.get(cid, f'Bird_{cid}')}"
        for k in range(per_class if cid in CUB_NAMES else 2):
            iid += 1
            rel = f"{folder}/{folder.split('.')[1]}_{k:04d}.png"
            tiny_png(cub / "images" / rel)
            images.append(f"{iid} {rel}")
            labels.append(f"{iid} {cid}")
            split.append(f"{iid} {k % 2}")
    (cub / "images.txt").write_text("\n".join(images) + "\n")
    (cub / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (cub / "train_test_split.txt").write_text("\n".join(split) + "\n")
    return root


@pytest.fixture(scope="module")
def cub_root(tmp_path_factory) -> Path:
    return make_cub(tmp_path_factory.mktemp("cub"))


def test_cub_reads_official_layout(cub_root):
    recs = read_cub(cub_root)  # the folder the tarball was extracted in
    assert len(recs) == 15 * 22 + 4
    r = next(r for r in recs if r.extra["class_id"] == 113)
    assert r.identity == "Baird_Sparrow" and r.group == "bird" and r.split in ("train", "test")
    assert Path(r.path).is_file()
    assert {x.split for x in recs} == {"train", "test"}
    sub = read_cub(cub_root / "CUB_200_2011", classes=[113], groups={113: "sparrow"})
    assert {(x.identity, x.group) for x in sub} == {("Baird_Sparrow", "sparrow")}


def test_cub_layout_errors_name_what_is_missing(tmp_path, cub_root):
    with pytest.raises(InputError, match="missing images.txt, image_class_labels.txt, classes.txt, "
                                         "train_test_split.txt, images/"):
        read_cub(tmp_path)
    broken = make_cub(tmp_path / "b", per_class=2, extra_classes=())
    (broken / "CUB_200_2011" / "train_test_split.txt").unlink()
    with pytest.raises(InputError, match=r"missing train_test_split.txt \("):
        read_cub(broken)
    gone = make_cub(tmp_path / "c", per_class=2, extra_classes=())
    victim = next((gone / "CUB_200_2011" / "images").rglob("*.png"))
    victim.unlink()
    with pytest.raises(InputError, match=r"1 CUB image file\(s\) listed in images.txt are missing, e.g. images/"):
        read_cub(gone)
    with pytest.raises(InputError, match="class id"):
        read_cub(cub_root, classes=[999])


def test_cub_paper_preset_groups_and_counts(cub_root):
    res = build_preset("cub-paper", cub_root, seed=3)
    assert set(res.groups) == {"sparrow", "tern", "wren"}
    assert res.groups["sparrow"] == [CUB_NAMES[c] for c in CUB_GROUPS["sparrow"]]
    assert {r.extra["class_id"] for r in res.records} == set(CUB_NAMES)
    for r in res.records:
        r.content_hash = r.path
    items, _ = curate(res.records, res.spec)
    per = Counter((i.identity, i.role) for i in items)
    assert all(per[(CUB_NAMES[c], "reference")] == 10 and per[(CUB_NAMES[c], "gallery")] == 10 for c in CUB_NAMES)
    items2, _ = curate(res.records, res.spec)
    assert [(i.path, i.role) for i in items] == [(i.path, i.role) for i in items2]


# --------------------------------------------------------------------------- Stanford Cars

CAR_CLASSES = sorted([*CARS_PAPER_MODELS, "Rolls-Royce Ghost Sedan 2012", "Hyundai Sonata Sedan 2012",
                      "Audi R8 Coupe 2012", "Acura TL Sedan 2012"])


def _annotations(rows):
    from numpy import zeros

    dtype = [(f, "O") for f in ("bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "fname")]
    arr = zeros((len(rows),), dtype=dtype)
    for i, (cls, fname) in enumerate(rows):
        arr[i] = (1, 2, 7, 7, cls, fname)
    return arr


def make_cars_devkit(root: Path, per_split: int = 2) -> Path:
    from scipy.io import savemat

    (root / "devkit").mkdir(parents=True)
    savemat(root / "devkit" / "cars_meta.mat", {"class_names": np.array(CAR_CLASSES, dtype=object)})
    for split, annos in (("train", root / "devkit" / "cars_train_annos.mat"),
                         ("test", root / "cars_test_annos_withlabels.mat")):
        rows = []
        for cid in range(1, len(CAR_CLASSES) + 1):
            for k in range(per_split):
                fname = f"{cid:03d}{k:02d}.png"
                tiny_png(root / f"cars_{split}" / fname)
                rows.append((cid, fname))
        savemat(annos, {"annotations": _annotations(rows)})
    return root


def test_cars_devkit_mat_layout(tmp_path):
    root = make_cars_devkit(tmp_path / "cars")
    recs = read_stanford_cars(root)
    assert len(recs) == len(CAR_CLASSES) * 4
    assert {r.identity for r in recs} == set(CAR_CLASSES) and {r.split for r in recs} == {"train", "test"}
    assert all(Path(r.path).is_file() and r.group == "car" for r in recs)
    (root / "cars_test_annos_withlabels.mat").unlink()  # the train split alone is enough
    assert len(read_stanford_cars(root)) == len(CAR_CLASSES) * 2
    import shutil

    shutil.rmtree(root / "cars_train")
    with pytest.raises(InputError, match=r"image folder\(s\) missing: cars_train/"):
        read_stanford_cars(root)
    (root / "devkit" / "cars_meta.mat").unlink()
    with pytest.raises(InputError, match="cars_meta.mat"):
        read_stanford_cars(root)


def test_cars_unlabelled_devkit_test_file_is_explained(tmp_path):
    from scipy.io import savemat

    root = make_cars_devkit(tmp_path / "cars", per_split=1)
    arr = np.zeros((1,), dtype=[(f, "O") for f in ("bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "fname")])
    arr[0] = (1, 2, 3, 4, "00101.png")
    savemat(root / "cars_test_annos_withlabels.mat", {"annotations": arr})
    with pytest.raises(InputError, match="lack field.*class.*withlabels"):
        read_stanford_cars(root)


def test_cars_all_in_one_folder_per_class_and_csv(tmp_path):
    from scipy.io import savemat

    one = tmp_path / "one"
    dtype = [(f, "O") for f in ("relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test")]
    arr = np.zeros((3,), dtype=dtype)
    for i in range(3):
        tiny_png(one / "car_ims" / f"{i:06d}.png")
        arr[i] = (f"car_ims/{i:06d}.png", 1, 1, 5, 5, i + 1, i % 2)
    savemat(one / "cars_annos.mat", {"annotations": arr, "class_names": np.array(CAR_CLASSES, dtype=object)})
    recs = read_stanford_cars(one)
    assert [r.identity for r in recs] == CAR_CLASSES[:3] and [r.split for r in recs] == ["train", "test", "train"]

    folders = tmp_path / "kaggle" / "car_data"
    for split in ("train", "test"):
        for cls in CAR_CLASSES[:2]:
            tiny_png(folders / split / cls / "a.png")
    recs = read_stanford_cars(tmp_path / "kaggle")
    assert sorted({r.identity for r in recs}) == CAR_CLASSES[:2] and len(recs) == 4

    flat = tmp_path / "csv"
    tiny_png(flat / "img" / "1.png")
    tiny_png(flat / "img" / "2.png")
    pd.DataFrame({"filename": ["img/1.png", "img/2.png"], "class": [1, 2]}).to_csv(flat / "labels.csv", index=False)
    (flat / "names.csv").write_text("\n".join(CAR_CLASSES) + "\n")
    assert [r.identity for r in read_stanford_cars(flat)] == CAR_CLASSES[:2]

    with pytest.raises(InputError, match="not a Stanford Cars folder.*devkit/cars_meta.mat"):
        read_stanford_cars(tmp_path / "csv" / "img")


def test_cars_paper_selects_the_documented_15_sedans(tmp_path):
    assert select_sedans(CAR_CLASSES) == list(CARS_PAPER_MODELS)
    root = make_cars_devkit(tmp_path / "cars", per_split=11)
    res = build_preset("cars-paper", root, seed=1)
    assert res.groups == {"car": list(CARS_PAPER_MODELS)}
    assert {r.identity for r in res.records} == set(CARS_PAPER_MODELS)
    for r in res.records:
        r.content_hash = r.path
    items, _ = curate(res.records, res.spec)
    per = Counter((i.identity, i.role) for i in items)
    assert set(per.values()) == {10} and len(per) == 30
    custom = build_preset("cars-paper", root, classes=CAR_CLASSES[:3])
    assert custom.groups == {"car": CAR_CLASSES[:3]}


# --------------------------------------------------------------------------- WildlifeReID-10k

WILD_SPECIES = {"cow": "cattle", "zebra": "Grevy's zebra", "tiger": "tiger", "giraffe": "giraffe_masai",
                "leopard": "leopard"}


def make_wildlife(root: Path) -> Path:
    rows = []
    for g, raw in WILD_SPECIES.items():
        for i in range(12):
            n = 3 if i == 11 else 5 + i  # 5..15 images, and one individual with too few
            for k in range(n):
                rel = f"images/{g}/ind{i:02d}/{k:03d}.png"
                tiny_png(root / rel)
                rows.append({"image_id": len(rows), "identity": f"{g}_ind{i:02d}", "path": rel, "species": raw,
                             "dataset": f"{g.title()}ID", "split": "train" if k % 3 else "test",
                             "orientation": "left", "date": "2020-01-01"})
    tiny_png(root / "images" / "dog" / "x.png")
    rows.append({"image_id": len(rows), "identity": "dog_1", "path": "images/dog/x.png", "species": "dog",
                 "dataset": "DogID", "split": "train", "orientation": None, "date": None})
    pd.DataFrame(rows).to_csv(root / "metadata.csv", index=False)
    return root


@pytest.fixture(scope="module")
def wild_root(tmp_path_factory) -> Path:
    return make_wildlife(tmp_path_factory.mktemp("wild") / "wildlifereid-10k")


def test_wildlife_reads_metadata(wild_root):
    recs = read_wildlife_reid10k(wild_root.parent)  # the folder above works too
    assert len(recs) == 5 * (sum(range(5, 16)) + 3) + 1
    r = recs[0]
    assert r.identity == "cow_ind00" and r.group == "cattle" and r.extra["dataset"] == "CowID"
    assert r.extra["orientation"] == "left" and r.split in ("train", "test") and Path(r.path).is_file()
    only = read_wildlife_reid10k(wild_root, species=["leopard"])
    assert {x.group for x in only} == {"leopard"}


def test_wildlife_layout_errors(tmp_path, wild_root):
    with pytest.raises(InputError, match="missing metadata.csv"):
        read_wildlife_reid10k(tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    pd.DataFrame({"identity": ["a"], "file": ["x.png"]}).to_csv(bad / "metadata.csv", index=False)
    with pytest.raises(InputError, match="lacks column.*path, species"):
        read_wildlife_reid10k(bad)
    gone = tmp_path / "gone"
    gone.mkdir()
    pd.DataFrame({"identity": ["a"], "path": ["images/x.png"], "species": ["tiger"]}).to_csv(
        gone / "metadata.csv", index=False)
    with pytest.raises(InputError, match=r"1 WildlifeReID-10k image file\(s\) .* e.g. images/x.png"):
        read_wildlife_reid10k(gone)


def test_wildlife_paper_preset_top10_refs_and_gallery(wild_root):
    res = build_preset("wildlife-paper", wild_root, seed=7)
    assert set(res.groups) == set(WILD_SPECIES)
    assert res.groups["tiger"] == [f"tiger_ind{i:02d}" for i in range(10, 0, -1)]  # most images first
    by = defaultdict(list)
    for r in res.records:
        by[r.identity].append(r)
    for ident, recs in by.items():
        refs = [r for r in recs if r.role == "reference"]
        assert len(refs) == n_references(len(recs)) and 4 <= len(refs) <= 10
    for r in res.records:
        r.content_hash = r.path
    items, _ = curate(res.records, res.spec)
    gal = Counter(i.identity for i in items if i.role == "gallery")
    assert max(gal.values()) <= 10 and min(gal.values()) >= 1
    assert {i.group for i in items} == set(WILD_SPECIES)
    again = build_preset("wildlife-paper", wild_root, seed=7)
    assert [(r.path, r.role) for r in again.records] == [(r.path, r.role) for r in res.records]
    other = build_preset("wildlife-paper", wild_root, seed=8)
    assert [(r.path, r.role) for r in other.records] != [(r.path, r.role) for r in res.records]
    with pytest.raises(InputError, match="no images of panda.*species values"):
        build_preset("wildlife-paper", wild_root, species=["panda"])


def test_n_references_rule():
    assert [n_references(n) for n in (5, 10, 14, 16, 20, 40)] == [4, 4, 4, 6, 10, 10]


# --------------------------------------------------------------------------- CLI

def test_gallery_build_cli_stores_the_preset(tmp_path, cub_root):
    ws = tmp_path / "ws"
    res = CliRunner().invoke(cli, ["--workspace", str(ws), "gallery", "build", "--preset", "cub-paper", "--root",
                                   str(cub_root), "--seed", "1", "--format", "json"], obj={})
    assert res.exit_code == 0, res.output
    info = json.loads(res.output[res.output.index("{"):])
    assert info["name"] == "cub-paper" and info["n_reference"] == 150 and info["n_gallery"] == 150
    assert info["n_groups"] == 3 and info["n_identities"] == 15
    res = CliRunner().invoke(cli, ["--workspace", str(ws), "gallery", "build", "--preset", "cub-paper", "--root",
                                   str(tmp_path / "nowhere")], obj={})
    assert res.exit_code != 0 and "CUB-200-2011 folder not found" in res.output


def test_species_values_map_to_paper_groups():
    from fpr.galleries.datasets.wildlife import species_groups

    got = species_groups(["cattle", "Grevy's zebra", "zebra_plains", "snow leopard", "leopard", "Tiger",
                          "giraffe_masai", "dog", "zebra shark"])
    assert got == {"cattle": "cow", "Grevy's zebra": "zebra", "zebra_plains": "zebra", "leopard": "leopard",
                   "Tiger": "tiger", "giraffe_masai": "giraffe"}


def test_wildlife_identities_shared_across_datasets_are_kept_apart(tmp_path):
    root = tmp_path / "w"
    rows = []
    for ds in ("A", "B"):
        for k in range(2):
            rel = f"images/{ds}/{k}.png"
            tiny_png(root / rel)
            rows.append({"identity": "1", "path": rel, "species": "tiger", "dataset": ds})
    pd.DataFrame(rows).to_csv(root / "metadata.csv", index=False)
    assert sorted({r.identity for r in read_wildlife_reid10k(root)}) == ["A_1", "B_1"]


def test_the_cli_preset_names_are_the_registry():
    # `fpr gallery build --preset` offers fpr.defaults.PRESET_NAMES so that start-up skips pandas; same list
    from fpr.defaults import PRESET_NAMES
    from fpr.galleries.datasets import PRESETS

    assert PRESET_NAMES == tuple(sorted(PRESETS))
