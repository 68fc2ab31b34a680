"""Auxiliary scorers: CLIP-T against a direct open_clip computation, copy-paste on hand-built cases,
and both through ``fpr query --scorers`` / ``fpr score`` / ``fpr scorers list``."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

import fpr.api as api
from fpr.cli.main import cli
from fpr.encoders.preprocess import OPENAI_MEAN, OPENAI_STD, Preprocessing
from fpr.encoders.registry import EncoderSpec, register, unregister
from fpr.encoders.weights import WeightsSource
from fpr.errors import NotFoundError
from fpr.galleries.curate import GallerySpec
from fpr.scorers import QueryBatch, get_scorer, run_scorers
from tests.conftest import write_image

# --------------------------------------------------------------------------- CLIP-T


class _Image(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model.encode_image(x)


@pytest.fixture
def tiny_clip():
    """A random-initialised open_clip model with a text tower, registered as encoder 'tiny-clip-test'."""
    import open_clip
    from open_clip.model import CLIP, CLIPTextCfg, CLIPVisionCfg

    torch.manual_seed(0)
    model = CLIP(embed_dim=32, vision_cfg=CLIPVisionCfg(layers=1, width=32, head_width=16, patch_size=8,
                                                        image_size=32),
                 text_cfg=CLIPTextCfg(context_length=16, vocab_size=49408, width=32, heads=2, layers=1)).eval()
    prep = Preprocessing(name="tiny-clip-32", size=32, mean=OPENAI_MEAN, std=OPENAI_STD)
    spec = EncoderSpec(id="tiny-clip-test", family="open_clip", dim=32, preprocessing=prep,
                       weights=WeightsSource(kind="none"), build=lambda w: _Image(model),
                       build_text=lambda w: (lambda texts: model.encode_text(open_clip.tokenize(texts,
                                                                                                context_length=16))))
    register(spec, replace=True)
    yield model
    unregister("tiny-clip-test")


def test_clip_t_equals_a_direct_open_clip_computation(tmp_path, tiny_clip):
    import open_clip
    from torchvision import transforms

    paths = [str(write_image(tmp_path / f"{i}.png", seed=i, size=48)) for i in range(5)]
    prompts = ["a photo of a leopard", "a bird on a branch", "", "a red sedan", "a leopard in the snow"]
    batch = QueryBatch([f"q{i}" for i in range(5)], paths, ["x"] * 5, ["g"] * 5, prompts, [[]] * 5,
                       device="cpu", options={"clip-t.encoder": "tiny-clip-test"})
    got = get_scorer("clip-t").score(batch)
    assert set(got["metric"]) == {"score"}
    assert "q2" not in set(got["query_id"])  # no prompt, no value

    tf = transforms.Compose([transforms.Resize((32, 32), interpolation=transforms.InterpolationMode.BILINEAR),
                             transforms.ToTensor(), transforms.Normalize(OPENAI_MEAN, OPENAI_STD)])
    keep = [i for i, p in enumerate(prompts) if p]
    with torch.no_grad():
        img = tiny_clip.encode_image(torch.stack([tf(Image.open(paths[i]).convert("RGB")) for i in keep]))
        txt = tiny_clip.encode_text(open_clip.tokenize([prompts[i] for i in keep], context_length=16))
        ref = (torch.nn.functional.normalize(img, dim=-1) * torch.nn.functional.normalize(txt, dim=-1)).sum(-1)
    np.testing.assert_allclose(got["value"].to_numpy(), ref.numpy().astype(np.float64), atol=1e-5)
    assert got["query_id"].tolist() == [f"q{i}" for i in keep]


def test_clip_t_without_weights_fails_with_the_registry_error(tmp_path):
    p = str(write_image(tmp_path / "a.png", seed=1))
    batch = QueryBatch(["q0"], [p], ["x"], ["g"], ["a prompt"], [[]], device="cpu")
    with pytest.raises(NotFoundError) as err:
        run_scorers(["clip-t"], batch)
    msg = err.value.one_line()
    assert "clip-vit-b-32" in msg and "\n" not in msg


def test_clip_t_needs_prompts(tmp_path):
    from fpr.errors import InputError

    p = str(write_image(tmp_path / "a.png", seed=1))
    with pytest.raises(InputError, match="needs prompts"):
        run_scorers(["clip-t"], QueryBatch(["q0"], [p], ["x"], ["g"], [None], [[]], device="cpu"))


# --------------------------------------------------------------------------- copy-paste: hand-built cases

def _smooth_noise(h, w, seed, scale):
    rng = np.random.default_rng(seed)
    small = rng.normal(size=(h // scale + 2, w // scale + 2)).astype(np.float32)
    im = Image.fromarray(small, mode="F").resize((w + 2 * scale, h + 2 * scale), Image.BICUBIC)
    a = np.asarray(im)[:h, :w]
    return (a - a.min()) / (np.ptp(a) + 1e-9)


def background(size, seed, textured=False):
    rng = np.random.default_rng(seed)
    base = rng.uniform(40, 215, size=3)
    arr = base + rng.uniform(-60, 60, size=3) * (_smooth_noise(size, size, seed, 24)[..., None] - 0.5) * 2
    if textured:  # grass-like fine texture: the reference's background has patches of its own
        arr = arr + (_smooth_noise(size, size, seed + 1, 4)[..., None] - 0.5) * 120
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def subject(size, pattern_seed, angle=0.0, warp=0.0, colour_seed=0, ellipse=(0.42, 0.3)):
    """A spotted body (a 'leopard'): the spot layout is the identity; angle and warp are the pose."""
    rng = np.random.default_rng(pattern_seed)
    pts = rng.uniform(-1, 1, size=(140, 2))
    radii = rng.uniform(0.025, 0.06, size=140)
    crng = np.random.default_rng(colour_seed)
    body, spot = crng.uniform(150, 230, size=3), crng.uniform(10, 80, size=3)
    yy, xx = (np.mgrid[0:size, 0:size] + 0.5) / size * 2 - 1
    a = np.deg2rad(angle)
    u, v = np.cos(a) * xx + np.sin(a) * yy, -np.sin(a) * xx + np.cos(a) * yy
    u, v = u + warp * np.sin(3 * v), v + warp * np.sin(2.5 * u)
    inside = (u / (2 * ellipse[0])) ** 2 + (v / (2 * ellipse[1])) ** 2 <= 1
    spotted = np.min((u[..., None] - pts[:, 0]) ** 2 + (v[..., None] - pts[:, 1]) ** 2 - radii ** 2, -1) <= 0
    rgb = np.where(spotted[..., None], spot, body) * (0.85 + 0.15 * (1 - (u ** 2 + v ** 2)))[..., None]
    return Image.fromarray(np.dstack([np.clip(rgb, 0, 255).astype(np.uint8), inside.astype(np.uint8) * 255]),
                           "RGBA")


def scene(bg: Image.Image, layer: Image.Image, scale: float, offset) -> Image.Image:
    lay = layer.resize((int(layer.width * scale), int(layer.height * scale)), Image.BICUBIC)
    out = bg.copy()
    out.paste(lay, offset, lay)
    return out


def hand_built_cases(folder: Path) -> tuple[list[str], dict[str, tuple[str, int]]]:
    """Two references of one subject; queries: copies (pasted on a new background, resized, JPEG) and
    re-renderings (the same spot pattern in another pose and colouring) with their expected flag."""
    folder.mkdir(parents=True, exist_ok=True)
    lay = subject(160, pattern_seed=1, colour_seed=1)
    refs = []
    for k, textured in enumerate((False, True)):
        ref = scene(background(256, 10 + k, textured), lay, 1.0, (48, 48))
        refs.append(str(folder / f"ref{k}.png"))
        ref.save(refs[-1])
    cases = {
        "resized-copy": (ref.resize((180, 180)), 1),
        "pasted-new-background": (scene(background(256, 20), lay, 0.6, (120, 30)), 1),
        "pasted-resized-jpeg": (scene(background(320, 21, True), lay, 0.8, (10, 150)).resize((200, 200)), 1),
        "rerendered-pose": (scene(background(256, 23), subject(160, 1, angle=-35, warp=0.12, colour_seed=2,
                                                               ellipse=(0.45, 0.27)), 0.8, (60, 60)), 0),
        "rerendered-same-background": (scene(background(256, 10), subject(160, 1, angle=30, warp=0.08,
                                                                          colour_seed=1), 1.0, (48, 48)), 0),
        "other-individual": (scene(background(256, 10), subject(160, 2, colour_seed=1), 1.0, (48, 48)), 0),
    }
    out = {}
    for name, (im, flag) in cases.items():
        path = folder / f"{name}.{'jpg' if 'jpeg' in name else 'png'}"
        im.convert("RGB").save(path, quality=75) if path.suffix == ".jpg" else im.save(path)
        out[name] = (str(path), flag)
    return refs, out


def test_copy_paste_flags_pastes_and_not_rerenderings(tmp_path):
    refs, cases = hand_built_cases(tmp_path)
    names = list(cases)
    batch = QueryBatch(names, [cases[n][0] for n in names], ["x"] * len(names), ["g"] * len(names),
                       [None] * len(names), [refs] * len(names), device="cpu",
                       options={"copy-paste.encoder": "pixels-16"})
    got = run_scorers(["copy-paste"], batch)
    wide = got.pivot(index="query_id", columns="metric", values="value")
    assert set(wide.columns) == {"score", "flag", "appearance", "pixel", "pixel_matches", "mirrored", "forward",
                                 "reverse"}
    for n in names:
        assert wide.loc[n, "flag"] == cases[n][1], (n, wide.loc[n].to_dict())
    copies = wide.loc[[n for n in names if cases[n][1] == 1]]
    renders = wide.loc[[n for n in names if cases[n][1] == 0]]
    # a clear margin on both pixel-level numbers, not just on the flag
    assert copies["pixel_matches"].min() >= 2 * renders["pixel_matches"].max()
    assert copies["pixel"].min() >= 2 * renders["pixel"].max()


def test_copy_paste_without_references_gives_no_values(tmp_path):
    p = str(write_image(tmp_path / "a.png", seed=1))
    got = run_scorers(["copy-paste"], QueryBatch(["q0"], [p], ["x"], ["g"], [None], [[]], device="cpu"))
    assert got.empty


def test_copy_paste_bad_option_is_one_line(tmp_path):
    from fpr.errors import InputError

    p = str(write_image(tmp_path / "a.png", seed=1))
    with pytest.raises(InputError, match="copy-paste.max_refs must be an integer, got .many."):
        run_scorers(["copy-paste"], QueryBatch(["q0"], [p], ["x"], ["g"], [None], [[p]], device="cpu",
                                               options={"copy-paste.max_refs": "many"}))


# --------------------------------------------------------------------------- end to end through the CLI

def _gallery_with_copies(tmp_path: Path, workspace: Path) -> Path:
    """A gallery whose identity 'spots-1' has the hand-built references; queries include copies."""
    refs, cases = hand_built_cases(tmp_path / "cases")
    tree = tmp_path / "tree"
    for i in range(3):
        for k in range(3):
            write_image(tree / "cats" / f"cat-{i}" / f"{k}.png", seed=100 * i + k)
    rows = [{"path": p, "identity": "spots-1", "group": "cats", "role": "reference"}
            for p in refs]
    rows += [{"path": str(p), "identity": p.parent.name, "group": "cats", "role": "gallery"}
             for p in sorted(tree.rglob("*.png"))]
    rows += [{"path": str(write_image(tmp_path / "g" / f"s{k}.png", seed=900 + k)), "identity": "spots-1",
              "group": "cats", "role": "gallery"} for k in range(2)]
    manifest = tmp_path / "gallery.csv"
    pd.DataFrame(rows).to_csv(manifest, index=False)
    api.import_gallery("cg", api.read_manifest(manifest), GallerySpec(), workspace=workspace)
    api.build_index("cg", "pixels-16", workspace=workspace)
    q = pd.DataFrame([{"path": path, "identity": "spots-1", "group": "cats", "method": name.split("-")[0],
                       "prompt": "a spotted animal", "query_id": name} for name, (path, flag) in cases.items()])
    qfile = tmp_path / "queries.csv"
    q.to_csv(qfile, index=False)
    return qfile


def test_query_and_score_join_scores_on_query_id(tmp_path, workspace):
    qfile = _gallery_with_copies(tmp_path, workspace)
    runner = CliRunner()
    r = runner.invoke(cli, ["--workspace", str(workspace), "query", "--index", "cg-pixels-16", "--queries",
                            str(qfile), "--run", "with-scores", "--scorers", "copy-paste", "--format", "json"])
    assert r.exit_code == 0, r.output
    res = api.load_run("with-scores", workspace=workspace)
    assert {"copy-paste.flag", "copy-paste.pixel", "copy-paste.appearance"} <= set(res.summary.columns)
    flags = res.aux[res.aux["metric"] == "flag"].set_index("query_id")["value"]
    assert flags["resized-copy"] == 1 and flags["pasted-new-background"] == 1 and flags["rerendered-pose"] == 0

    # the same scores added afterwards to a run made without them
    r = runner.invoke(cli, ["--workspace", str(workspace), "query", "--index", "cg-pixels-16", "--queries",
                            str(qfile), "--run", "plain", "--format", "json"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(cli, ["--workspace", str(workspace), "score", "--run", "plain", "--scorers", "copy-paste",
                            "--format", "csv"])
    assert r.exit_code == 0, r.output
    assert "copy-paste.flag" in r.stdout.splitlines()[0]
    later = api.load_run("plain", workspace=workspace).aux.set_index(["query_id", "metric"])["value"]
    direct = res.aux.set_index(["query_id", "metric"])["value"]
    pd.testing.assert_series_equal(later.sort_index(), direct.sort_index())
    # a second score without --overwrite is a conflict, in one line
    r = runner.invoke(cli, ["--workspace", str(workspace), "score", "--run", "plain", "--scorers", "copy-paste"])
    assert r.exit_code != 0 and "already has scores" in r.output
    out = tmp_path / "export.csv"
    assert runner.invoke(cli, ["--workspace", str(workspace), "export", "--run", "plain", "--out",
                               str(out)]).exit_code == 0
    exported = pd.read_csv(out).set_index("query_id")
    assert exported.loc["pasted-new-background", "copy-paste.flag"] == 1


def test_score_with_missing_clip_weights_is_one_line(tmp_path, workspace):
    qfile = _gallery_with_copies(tmp_path, workspace)
    runner = CliRunner()
    assert runner.invoke(cli, ["--workspace", str(workspace), "query", "--index", "cg-pixels-16", "--queries",
                               str(qfile), "--run", "r"]).exit_code == 0
    r = runner.invoke(cli, ["--workspace", str(workspace), "score", "--run", "r", "--scorers", "clip-t"])
    assert r.exit_code != 0
    err = [ln for ln in r.output.splitlines() if ln.startswith("fpr: error")]
    assert len(err) == 1 and "clip-vit-b-32" in err[0]
    assert "Traceback" not in r.output


def test_scorers_list():
    r = CliRunner().invoke(cli, ["scorers", "list", "--format", "json"])
    assert r.exit_code == 0, r.output
    import json

    rows = {row["name"]: row for row in json.loads(r.output)}
    assert rows["clip-t"]["needs"] == "image,prompt" and rows["clip-t"]["metrics"] == "clip-t.score"
    assert rows["copy-paste"]["needs"] == "image,references"
    assert "copy-paste.flag" in rows["copy-paste"]["metrics"] and rows["copy-paste"]["description"]
    # declared Option records list as <scorer>.<name>, like the dict keys of the others
    assert rows["vistar-li"]["options"] == "vistar-li.camera_tilt,vistar-li.object_chroma,vistar-li.shadow_ratio"
    assert "vistar-tr.unclip" in rows["vistar-tr"]["options"]
    r = CliRunner().invoke(cli, ["scorers", "list"])
    assert r.exit_code == 0 and "copy-paste" in r.output
