"""Training: a tiny run learns; cards + safetensors round-trip through the registry; timm models train; bad input."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from fpr.encoders import registry
from fpr.encoders import train as tr
from fpr.encoders.trained import CARD_NAME, WEIGHTS_NAME, load_card, load_network
from fpr.encoders.weights import weights_dir
from fpr.errors import ConflictError, FprError, InputError
from fpr.eval.pipeline import leave_one_out_map
from fpr.galleries import training


def _tiny_world(**kw):
    # photographs only: a few seconds of training must visibly learn (new views need the full recipe)
    args = dict(species=("zebra",), identities=24, per_identity=8, render_size=64, val_identities=8, val_images=4,
                poses="real")
    args.update(kw)
    return training.WorldSource(**args)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A few seconds of training of the small CNN on one species (written to a temp folder)."""
    out = tmp_path_factory.mktemp("enc") / "tiny-zebra"
    torch.manual_seed(0)
    src = _tiny_world()
    cfg = tr.TrainConfig(arch="fpr-cnn-grid", size=48, dim=32, epochs=8, batch_size=32, lr=3e-3, workers=0, seed=0,
                         threads=1)
    res = tr.train(src, cfg, encoder_id="tiny-zebra", out=out, command="pytest", evaluate=leave_one_out_map)
    return res, src


@pytest.mark.slow
def test_small_training_improves_oracle_map(trained):
    """A few seconds of training learn the training identities: on fresh renders of them the oracle mAP
    rises well above the untrained network's (the same seed's initialisation). Held-out identities of
    world v2 need the full recipe (docs/world.md: 0.86 after 30 epochs on 300 identities)."""
    from fpr.encoders.train import validate
    from fpr.encoders.trained import build_network, load_network
    from fpr.galleries.world import render_identity

    res, src = trained
    losses = [h["loss"] for h in res.history]
    assert len(losses) == 8 and losses[-1] < 0.6 * losses[0], losses
    fresh = [(render_identity(sp, i, f"check|{k}", size=64, poses="real"), f"{sp}/{i}", sp)
             for sp, i, _twin in src.items[:12] for k in range(4)]
    pre = res.card["preprocessing"]
    from fpr.encoders.preprocess import Preprocessing

    prep = Preprocessing(**pre)
    torch.manual_seed(0)
    untrained = build_network("fpr-cnn-grid", 32)
    trained_net = load_network(res.card, res.weights_path)
    before = validate(untrained, fresh, prep, torch.device("cpu"), leave_one_out_map)["*"]
    after = validate(trained_net, fresh, prep, torch.device("cpu"), leave_one_out_map)["*"]
    assert after > before + 0.1, (before, after)
    assert res.card["metrics"]["untrained_val_map"] is not None and res.val_map is not None


def test_card_has_the_contract_fields(trained):
    res, src = trained
    card = load_card(res.card_path)
    for key in ("id", "architecture", "dim", "preprocessing", "training_data", "seed", "metrics", "command",
                "versions", "family", "loss"):
        assert key in card, key
    assert card["training_data"]["fingerprint"] == src.fingerprint()
    assert card["preprocessing"]["size"] == 48 and card["dim"] == 32
    assert {"torch", "timm", "safetensors"} <= set(card["versions"])


def test_round_trip_through_registry(trained, tmp_path):
    res, _ = trained
    dest = weights_dir() / "tiny-zebra"
    shutil.copytree(res.card_path.parent, dest)
    spec = registry.get_spec("tiny-zebra")
    assert spec.dim == 32 and spec.weights.kind == "local" and spec.input_size == 48
    assert any(r["id"] == "tiny-zebra" for r in map(registry.describe, registry.all_specs().values()))
    enc = registry.load_encoder("tiny-zebra", device="cpu")
    assert enc.weights.where == "weights-dir"
    from fpr.galleries.world import render_identity

    imgs = [render_identity("zebra", 1_000_001 + i, "rt", size=64) for i in range(4)]
    batch = torch.stack([enc.preprocessing(im) for im in imgs])
    got = enc.embed_batch(batch)
    net = load_network(load_card(res.card_path), res.weights_path)
    want = torch.nn.functional.normalize(net(batch), dim=1).detach().numpy()
    assert got.shape == (4, 32)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_strict_load_refuses_mismatched_weights(trained, tmp_path):
    res, _ = trained
    card = load_card(res.card_path)
    card["architecture"] = "fpr-cnn"  # wider network: keys/shapes differ
    with pytest.raises(FprError):
        load_network(card, res.weights_path)


def test_discovery_lists_broken_cards_as_broken():
    folder = weights_dir() / "broken"
    folder.mkdir(parents=True)
    (folder / CARD_NAME).write_text("{not json")
    (weights_dir() / "wrong-folder").mkdir()
    (weights_dir() / "wrong-folder" / CARD_NAME).write_text(json.dumps(
        {"id": "other", "architecture": "fpr-cnn-s", "dim": 8, "preprocessing": {}}))
    specs = registry.all_specs()
    assert "broken" not in specs and "other" not in specs and "wrong-folder" not in specs
    broken = registry.broken_encoders()
    assert "not valid JSON" in broken["broken"].reason
    assert "sits in folder 'wrong-folder'" in broken["wrong-folder"].reason


@pytest.mark.parametrize("arch", ["resnet18", "efficientnetv2_rw_t"])
def test_timm_architecture_trains_and_loads(arch, tmp_path):
    src = _tiny_world(identities=4, per_identity=2, val_identities=2, val_images=2)
    cfg = tr.TrainConfig(arch=arch, size=64, dim=16, epochs=1, batch_size=4, steps_per_epoch=2, workers=0,
                         threads=1)
    res = tr.train(src, cfg, encoder_id=f"t-{arch.replace('_', '-')}", out=tmp_path / "w")
    assert res.card["family"] == "timm" and res.card["architecture"] == arch
    net = load_network(res.card, res.weights_path)
    with torch.no_grad():
        out = net(torch.zeros(2, 3, 64, 64))
    assert out.shape == (2, 16)


def test_records_source_holds_out_identities(tiny_tree):
    from fpr.galleries.manifest import read_folder

    src = training.RecordsSource(read_folder(tiny_tree), seed=0, val_fraction=0.34)
    val_ids = {k for _, k, _ in src.val}
    assert not val_ids & set(src.classes)
    assert len(src.classes) >= 2
    cfg = tr.TrainConfig(arch="fpr-cnn-s", size=32, dim=8, epochs=1, batch_size=4, workers=0)
    ds = src.dataset(cfg.preprocessing(), 0)
    x, c = ds[(0, 0)]
    assert x.shape == (3, 32, 32) and 0 <= c < len(src.classes)


def test_unknown_arch_lists_valid_ones():
    with pytest.raises(InputError) as exc:
        tr.TrainConfig(arch="no-such-net").check()
    msg = exc.value.one_line()
    assert "fpr-cnn-s" in msg and "\n" not in msg


def test_existing_encoder_is_not_overwritten(trained):
    res, src = trained
    cfg = tr.TrainConfig(arch="fpr-cnn-grid", size=48, dim=32, epochs=1, batch_size=24, workers=0)
    with pytest.raises(ConflictError):
        tr.train(src, cfg, encoder_id="tiny-zebra", out=res.card_path.parent)


def test_bad_ids_and_sizes():
    with pytest.raises(InputError):
        tr._check_id("bad id!")
    with pytest.raises(InputError):
        tr.TrainConfig(size=8).check()


def test_cli_train_errors_are_one_line(tmp_path):
    from fpr.cli.main import cli

    runner = CliRunner()
    r = runner.invoke(cli, ["--workspace", str(tmp_path / "ws"), "encoders", "train", "--id", "x",
                            "--source", str(tmp_path / "missing.csv")], obj={})
    assert r.exit_code == 2 and "training source not found" in r.output and r.output.count("\n") == 1
    r = runner.invoke(cli, ["--workspace", str(tmp_path / "ws"), "encoders", "train", "--id", "x",
                            "--arch", "nonsense-net"], obj={})
    assert r.exit_code == 2 and "fpr-cnn-s" in r.output


def test_cli_train_world_smoke(tmp_path):
    from fpr.cli.main import cli

    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path / "ws"), "encoders", "train", "--id", "cli-smoke",
                                 "--source", "world", "--identities", "3", "--per-identity", "2", "--epochs", "1",
                                 "--batch-size", "4", "--steps-per-epoch", "1", "--size", "32", "--dim", "8",
                                 "--render-size", "64", "--workers", "0", "--threads", "1", "--format", "json"], obj={})
    assert r.exit_code == 0, r.output
    row = json.loads(r.output)
    assert row["id"] == "cli-smoke"
    assert (weights_dir() / "cli-smoke" / WEIGHTS_NAME).exists()
    assert registry.get_spec("cli-smoke").dim == 8


def test_cli_train_from_stored_gallery(tiny_tree, tmp_path):
    from fpr import api
    from fpr.cli.main import cli

    ws = tmp_path / "ws"
    api.import_gallery("pets", api.read_folder(tiny_tree), workspace=ws)
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "encoders", "train", "--id", "pets-enc", "--gallery", "pets",
                                 "--arch", "fpr-cnn-s", "--epochs", "1", "--batch-size", "4", "--size", "32",
                                 "--dim", "8", "--workers", "0", "--threads", "1", "--val-fraction", "0.34",
                                 "--format", "json"], obj={})
    assert r.exit_code == 0, r.output
    card = json.loads((weights_dir() / "pets-enc" / CARD_NAME).read_text())
    assert card["training_data"]["name"] == "gallery:pets" and card["family"] == "builtin-cnn"
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "encoders", "train", "--id", "x", "--gallery", "nope"],
                           obj={})
    assert r.exit_code == 2 and "nope" in r.output


def test_training_is_reproducible_with_a_fixed_seed(tmp_path):
    src = _tiny_world(identities=4, per_identity=4, val_identities=2, val_images=2)
    cfg = tr.TrainConfig(arch="fpr-cnn-s", size=32, dim=8, epochs=1, batch_size=8, workers=0, threads=1, seed=3)
    a = tr.train(src, cfg, encoder_id="rep", out=tmp_path / "a")
    b = tr.train(src, cfg, encoder_id="rep", out=tmp_path / "b")
    from safetensors.torch import load_file

    wa, wb = load_file(str(a.weights_path)), load_file(str(b.weights_path))
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa), [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert a.weights_path.read_bytes() == b.weights_path.read_bytes()  # same bytes: same checksum


def test_twins_add_a_class_per_identity_with_part_of_the_markings_redrawn():
    """`--twins 0.25`: every training identity gets a twin class whose renders redraw a quarter of its markings
    (a blob-shaped region), nothing else; the twins enter the training-data fingerprint."""
    from fpr.errors import InputError
    from fpr.galleries.world import identity_markings
    from fpr.galleries.world.patterns import body_mask

    plain = training.WorldSource(identities=3, per_identity=2, seed=0)
    twins = training.WorldSource(identities=3, per_identity=2, seed=0, twins=0.25)
    assert len(twins.classes) == 2 * len(plain.classes) == 18
    assert twins.classes[:9] == plain.classes and twins.classes[9:] == [c + "~twin" for c in plain.classes]
    assert twins.describe()["twins"] == 0.25 and "twins" not in plain.describe()
    assert twins.fingerprint() != plain.fingerprint()
    sp, ident, _ = twins.items[0]
    base = identity_markings(sp, ident).labels()
    twin = identity_markings(sp, ident, siblings=0.25, family=training.TWIN_FAMILY_BASE + ident).labels()
    changed = float((base != twin)[body_mask(sp)].mean())
    assert 0.1 < changed < 0.35, changed  # a quarter of the body redrawn (where the new pattern differs)
    ds = twins.dataset(lambda im: torch.from_numpy(np.asarray(im, np.float32)), seed=0)
    assert len(ds) == 18 * 2
    x0, c0 = ds[(0, 0)]
    xt, ct = ds[(0, 9 * 2)]  # the first identity's twin, same k
    assert (c0, ct) == (0, 9) and not torch.equal(x0, xt)
    with pytest.raises(InputError, match="--twins must be in"):
        training.WorldSource(identities=3, twins=1.0)
