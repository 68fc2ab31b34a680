"""The ``*-official`` presets pick exactly what the released loaders pick, on tiny trees in the real layouts.

Expected images are listed by hand (file index within the class / identity, in the dataset's row order);
the CUB and WildlifeReID-10k draws are also cross-checked against the released pandas expressions
(``groupby(...).sample(..., random_state=...)``) evaluated on the same tables.
"""
from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from fpr.cli.main import cli
from fpr.errors import InputError
from fpr.galleries.datasets import build_preset
from fpr.galleries.datasets.official import CARS_OFFICIAL_LABELS, CUB_OFFICIAL_GROUPS, read_hf_class_names
from tests.galleries.test_datasets import _annotations, make_cub, tiny_png


def _roles(records, key=lambda r: int(Path(r.path).stem.split("_")[-1])):
    out: dict = defaultdict(lambda: defaultdict(list))
    for r in records:
        out[(r.group, r.identity)][r.role].append(key(r))
    return out


# --------------------------------------------------------------------------- CUB

@pytest.fixture(scope="module")
def cub21(tmp_path_factory) -> Path:
    return make_cub(tmp_path_factory.mktemp("cub") / "c", per_class=21)


def _released_cub(root: Path, seed: int = 101) -> dict:
    """load_cub_data.py's pandas expressions, on the same files."""
    cub = root / "CUB_200_2011"
    images = pd.read_csv(cub / "images.txt", sep=" ", names=["img_id", "img_path"])
    labels = pd.read_csv(cub / "image_class_labels.txt", sep=" ", names=["img_id", "class_id"])
    split = pd.read_csv(cub / "train_test_split.txt", sep=" ", names=["img_id", "is_train"])
    classes = pd.read_csv(cub / "classes.txt", sep=" ", names=["class_id", "class_name"])
    df = images.merge(labels, on="img_id").merge(split, on="img_id").merge(classes, on="class_id")
    df[["class_num", "name"]] = df["class_name"].str.split(".", expand=True)
    out = {}
    for group, ids in CUB_OFFICIAL_GROUPS.items():
        g = df[df["class_id"].isin(ids)]
        gallery = g.groupby("name", group_keys=False).sample(n=10, random_state=seed)
        rest = g[~g["img_path"].isin(gallery["img_path"])]
        train = rest.groupby("name", group_keys=False).sample(n=10, random_state=seed)
        for role, part in (("gallery", gallery), ("reference", train)):
            for name, rel in zip(part["name"], part["img_path"]):
                out.setdefault((group, name), {}).setdefault(role, []).append(int(rel.split("_")[-1][:4]))
    return out


def test_cub_official_picks_the_released_images(cub21):
    res = build_preset("cub-official", cub21)
    got = _roles(res.records)
    # hand-listed: file index within the species folder, in draw order (RandomState(101), species sorted)
    assert dict(got[("sparrow", "Baird_Sparrow")]) == {"gallery": [7, 18, 2, 3, 1, 16, 19, 12, 10, 0],
                                                       "reference": [6, 15, 17, 9, 4, 20, 8, 11, 14, 13]}
    # the state runs on across the group's species: the second species gets other draws
    assert dict(got[("sparrow", "Black_throated_Sparrow")]) == {"gallery": [18, 16, 6, 5, 14, 4, 15, 1, 13, 0],
                                                                "reference": [9, 19, 12, 11, 20, 7, 8, 3, 17, 10]}
    # each group starts a fresh RandomState(101)
    assert got[("wren", "Bewick_Wren")] == got[("sparrow", "Baird_Sparrow")]
    assert {k: dict(v) for k, v in got.items()} == _released_cub(cub21)
    assert len(res.records) == 15 * 20 and res.spec.gallery_per_identity is None
    assert res.groups["tern"] == ["Caspian_Tern", "Common_Tern", "Elegant_Tern", "Forsters_Tern", "Least_Tern"]
    # another seed, another draw; kmeans is not a released option
    assert _roles(build_preset("cub-official", cub21, seed=7).records) != got
    with pytest.raises(InputError, match="no --sampling kmeans"):
        build_preset("cub-official", cub21, sampling="kmeans")


def test_cub_official_needs_20_images(tmp_path):
    with pytest.raises(InputError, match=r"at least 20 images per species; .*\(19\)"):
        build_preset("cub-official", make_cub(tmp_path / "c", per_class=19))


# --------------------------------------------------------------------------- Stanford Cars

DEVKIT_NAMES = [  # cars_meta.mat order, classes 1..35 (= Hugging Face labels 0..34)
    "AM General Hummer SUV 2000", "Acura RL Sedan 2012", "Acura TL Sedan 2012", "Acura TL Type-S 2008",
    "Acura TSX Sedan 2012", "Acura Integra Type R 2001", "Acura ZDX Hatchback 2012",
    "Aston Martin V8 Vantage Convertible 2012", "Aston Martin V8 Vantage Coupe 2012",
    "Aston Martin Virage Convertible 2012", "Aston Martin Virage Coupe 2012", "Audi RS 4 Convertible 2008",
    "Audi A5 Coupe 2012", "Audi TTS Coupe 2012", "Audi R8 Coupe 2012", "Audi V8 Sedan 1994",
    "Audi 100 Sedan 1994", "Audi 100 Wagon 1994", "Audi TT Hatchback 2011", "Audi S6 Sedan 2011",
    "Audi S5 Convertible 2012", "Audi S5 Coupe 2012", "Audi S4 Sedan 2012", "Audi S4 Sedan 2007",
    "Audi TT RS Coupe 2012", "BMW ActiveHybrid 5 Sedan 2012", "BMW 1 Series Convertible 2012",
    "BMW 1 Series Coupe 2012", "BMW 3 Series Sedan 2012", "BMW 3 Series Wagon 2012",
    "BMW 6 Series Convertible 2007", "BMW X5 SUV 2007", "BMW X6 SUV 2012", "BMW M3 Coupe 2012",
    "BMW M5 Sedan 2010"]
LABELS = [1, 2, 3, 4, 6, 11, 12, 13, 18, 19, 25, 27, 28, 33, 34]


def _png_bytes(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def make_cars_hf(root: Path) -> Path:
    """The Hugging Face snapshot of Donghyun99/Stanford-Cars: README.md card + data/<split>-*.parquet."""
    (root / "data").mkdir(parents=True)
    card = ["---", "dataset_info:", "  features:", "  - name: image", "    dtype: image", "  - name: label",
            "    dtype:", "      class_label:", "        names:"]
    card += [f"          '{i}': {n}" for i, n in enumerate(DEVKIT_NAMES)]
    card += ["  splits:", "  - name: test", "    num_examples: 1", "---", "# Stanford Cars"]
    (root / "README.md").write_text("\n".join(card) + "\n")
    for split, per_label in (("train", 3), ("test", 22)):
        rows = []
        # interleaved labels; label 5 (Acura Integra, not selected) in between
        for k in range(per_label):
            for lab in [5, *LABELS]:
                rows.append({"image": {"bytes": _png_bytes(len(rows) + (10_000 if split == "train" else 0)),
                                       "path": f"{lab}_{k}.png"}, "label": lab})
        half = len(rows) // 2  # two shards, as the Hub writes them
        for i, part in enumerate((rows[:half], rows[half:])):
            pd.DataFrame(part).to_parquet(root / "data" / f"{split}-{i:05d}-of-00002.parquet")
    return root


def test_cars_official_on_the_hugging_face_copy(tmp_path):
    root = make_cars_hf(tmp_path / "cars")
    assert read_hf_class_names(root / "README.md")[33] == "BMW M3 Coupe 2012"
    res = build_preset("cars-official", root)
    assert res.groups["car"] == [CARS_OFFICIAL_LABELS[lab] for lab in LABELS]
    assert [DEVKIT_NAMES[lab] for lab in LABELS] == [CARS_OFFICIAL_LABELS[lab] for lab in LABELS]
    # test rows only: label L's k-th test image sits at row k*16 + 1 + LABELS.index(L) (shard 0 holds 176 rows)
    by = defaultdict(lambda: defaultdict(list))
    for r in res.records:
        assert r.split == "test" and Path(r.path).is_file() and r.group == "car"
        global_row = r.extra["row"] + (176 if r.extra["file"].startswith("test-00001") else 0)
        by[r.extra["label"]][r.role].append((global_row - 1 - LABELS.index(r.extra["label"])) // 16)
    for lab in LABELS:
        assert by[lab] == {"gallery": list(range(10)), "reference": list(range(10, 20))}
    assert len(res.records) == 300
    assert not any("differently" in n for n in res.notes)
    # image bytes are written unchanged, once
    first = next(r for r in res.records if r.extra["label"] == 1 and r.role == "gallery")
    assert Path(first.path).read_bytes() == _png_bytes(1)
    mtime = Path(first.path).stat().st_mtime_ns
    build_preset("cars-official", root)
    assert Path(first.path).stat().st_mtime_ns == mtime


def make_cars_devkit_official(root: Path, per_label: int = 21) -> Path:
    from scipy.io import savemat

    (root / "devkit").mkdir(parents=True)
    savemat(root / "devkit" / "cars_meta.mat", {"class_names": np.array(DEVKIT_NAMES, dtype=object)})
    for split, annos, n in (("train", root / "devkit" / "cars_train_annos.mat", 2),
                            ("test", root / "cars_test_annos_withlabels.mat", per_label)):
        rows = []
        for k in range(n):
            for lab in LABELS:
                fname = f"{lab + 1:03d}{k:02d}.png"
                tiny_png(root / f"cars_{split}" / fname)
                rows.append((lab + 1, fname))
        savemat(annos, {"annotations": _annotations(rows)})
    return root


def test_cars_official_on_the_devkit_layout(tmp_path):
    root = make_cars_devkit_official(tmp_path / "cars")
    res = build_preset("cars-official", root)
    got = _roles(res.records, key=lambda r: Path(r.path).name)
    assert dict(got[("car", "BMW M3 Coupe 2012")]) == {
        "gallery": [f"034{k:02d}.png" for k in range(10)], "reference": [f"034{k:02d}.png" for k in range(10, 20)]}
    assert all("cars_test" in r.path for r in res.records) and len(res.records) == 300
    assert any("34=BMW M5 Sedan 2010" in n for n in res.notes)


def test_cars_official_folder_layout_and_missing_labels(tmp_path):
    root = tmp_path / "cars"
    for lab in LABELS:
        for k in range(20):
            tiny_png(root / "test" / CARS_OFFICIAL_LABELS[lab] / f"{k:02d}.png")
        tiny_png(root / "train" / CARS_OFFICIAL_LABELS[lab] / "t.png")
    res = build_preset("cars-official", root)
    got = _roles(res.records, key=lambda r: Path(r.path).name)
    assert dict(got[("car", "Audi A5 Coupe 2012")]) == {"gallery": [f"{k:02d}.png" for k in range(10)],
                                                        "reference": [f"{k:02d}.png" for k in range(10, 20)]}
    import shutil

    shutil.rmtree(root / "test" / "Audi A5 Coupe 2012")
    with pytest.raises(InputError, match=r"no test images of label\(s\) 12 \(Audi A5 Coupe 2012\)"):
        build_preset("cars-official", root)


# --------------------------------------------------------------------------- WildlifeReID-10k

# images per zebra individual: z00 has too few (< 9); z01 and z11 tie on 4 references (name decides)
ZEBRA_COUNTS = {"z00": 8, "z01": 9, "z02": 10, "z03": 11, "z04": 12, "z05": 13, "z06": 14, "z07": 15, "z08": 30,
                "z09": 20, "z10": 16, "z11": 9}


def make_wildlife_official(root: Path) -> Path:
    rows = []
    order = [(i, k) for k in range(30) for i in ZEBRA_COUNTS if k < ZEBRA_COUNTS[i]]  # interleaved rows
    for ident, k in order:
        rel = f"images/zebra/{ident}/{k:03d}.png"
        tiny_png(root / rel)
        rows.append({"identity": ident, "path": rel, "species": "zebra", "dataset": "ZebraID"})
    for k in range(12):  # another species: never selected when only zebras are asked for
        rel = f"images/cow/c1/{k:03d}.png"
        tiny_png(root / rel)
        rows.append({"identity": "c1", "path": rel, "species": "cow", "dataset": "CowID"})
    pd.DataFrame(rows).to_csv(root / "metadata.csv", index=False)
    return root


Z08_REFERENCES = [0, 8, 9, 12, 15, 17, 23, 24, 27, 28]


@pytest.fixture(scope="module")
def zebra_root(tmp_path_factory) -> Path:
    return make_wildlife_official(tmp_path_factory.mktemp("wild") / "wildlifereid-10k")


def _released_reid(root: Path, names: list[str], seed: int = 42) -> dict:
    """load_data_reid.py's per-identity pandas draws for the given (selected) identities."""
    df = pd.read_csv(root / "metadata.csv")
    df = df[df["species"] == "zebra"].rename(columns={"identity": "name", "path": "file_path"})
    # groupby(...).apply(lambda x: x.sample(...)), written as the loop it is (pandas 3 drops the key column)
    train = df.groupby("name").filter(lambda x: len(x) >= 9)
    train = pd.concat([x.sample(n=min(len(x) - 5, 10), random_state=seed) for _, x in train.groupby("name")])
    train = train[train["name"].isin(names)]
    rest = df[~df["file_path"].isin(train["file_path"])]
    gallery = pd.concat([x.sample(n=min(len(x), 15), random_state=seed)
                         for _, x in rest[rest["name"].isin(names)].groupby("name")])
    out: dict = defaultdict(lambda: defaultdict(list))
    for role, part in (("reference", train), ("gallery", gallery)):
        for name, p in zip(part["name"], part["file_path"]):
            out[("zebra", name)][role].append(int(Path(p).stem))
    return out


def test_wildlife_official_selection(zebra_root):
    res = build_preset("wildlife-official", zebra_root, species=["zebra"])
    chosen = ["z07", "z08", "z09", "z10", "z06", "z05", "z04", "z03", "z02", "z01"]
    assert sorted(res.groups["zebra"]) == sorted(chosen)
    got = _roles(res.records, key=lambda r: int(Path(r.path).stem))
    counts = {i: (len(got[("zebra", i)]["reference"]), len(got[("zebra", i)]["gallery"])) for i in chosen}
    assert counts == {"z01": (4, 5), "z02": (5, 5), "z03": (6, 5), "z04": (7, 5), "z05": (8, 5), "z06": (9, 5),
                      "z07": (10, 5), "z08": (10, 15), "z09": (10, 10), "z10": (10, 6)}
    # hand-listed: image index within the individual (RandomState(42).choice on its rows in CSV order)
    assert dict(got[("zebra", "z01")]) == {"reference": [0, 1, 5, 7], "gallery": [2, 3, 4, 6, 8]}
    assert got[("zebra", "z08")]["reference"] == Z08_REFERENCES
    released = _released_reid(zebra_root, chosen)
    assert {k: {role: sorted(v) for role, v in d.items()} for k, d in got.items()} == \
        {k: {role: sorted(v) for role, v in d.items()} for k, d in released.items()}
    assert ("zebra", "z00") not in got and ("zebra", "z11") not in got and ("cow", "c1") not in got
    assert any("load_data_reid.py, seed 42" in n for n in res.notes)


def test_wildlife_official_ablation_adds_every_identity(zebra_root):
    res = build_preset("wildlife-official-ablation", zebra_root, species=["zebra"])
    base = _roles(build_preset("wildlife-official", zebra_root, species=["zebra"]).records,
                  key=lambda r: int(Path(r.path).stem))
    got = _roles(res.records, key=lambda r: int(Path(r.path).stem))
    # distractors: every image (<= 15) of the unselected individuals, gallery only
    assert dict(got[("zebra", "z00")]) == {"gallery": got[("zebra", "z00")]["gallery"]}
    assert sorted(got[("zebra", "z00")]["gallery"]) == list(range(8))
    assert sorted(got[("zebra", "z11")]["gallery"]) == list(range(9))
    # z08 (30 images): 10 references, 15 gallery, and its 5 remaining images join the gallery
    assert got[("zebra", "z08")]["reference"] == base[("zebra", "z08")]["reference"]
    extra = set(got[("zebra", "z08")]["gallery"]) - set(base[("zebra", "z08")]["gallery"])
    assert len(got[("zebra", "z08")]["gallery"]) == 20 and len(extra) == 5
    assert extra == set(range(30)) - set(base[("zebra", "z08")]["gallery"]) - set(base[("zebra", "z08")]["reference"])
    assert sorted(res.groups["zebra"]) == sorted(base_id for (_, base_id) in base)
    assert any("2 distractor identit" in n for n in res.notes)


def test_official_presets_in_the_cli(tmp_path, cub21):
    ws = tmp_path / "ws"
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "gallery", "build", "--preset", "cub-official",
                                 "--root", str(cub21), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert '"n_reference": 150' in r.output.replace(" ", "").replace('"n_reference":150', '"n_reference": 150')
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "gallery", "build", "--preset", "cars-official",
                                 "--root", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "Traceback" not in r.output
