"""refvnli: the loader on a tiny random PaliGemma checkpoint saved in the real Hugging Face layout (offline,
no remote code); ta/sp against transformers' own generate() restricted to the digits; missing checkpoint."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fpr.errors import NotFoundError
from fpr.scorers import QueryBatch, run_scorers
from fpr.scorers.refvnli import scorer as refvnli
from tests.conftest import write_image

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        PaliGemmaConfig,
        PaliGemmaForConditionalGeneration,
        PaliGemmaProcessor,
        PreTrainedTokenizerFast,
        SiglipImageProcessor,
    )

    words = ["<pad>", "<eos>", "<bos>", "<unk>", "0", "1", "a", "photo", "of", "<", ">", "/", "u", "[", "]", "V",
             "leopard", "in", "the", "snow"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>")
    image_proc = SiglipImageProcessor(size={"height": 28, "width": 28})
    image_proc.image_seq_length = 4
    proc = PaliGemmaProcessor(image_processor=image_proc, tokenizer=fast)
    cfg = PaliGemmaConfig(
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                           image_size=28, patch_size=14, projection_dim=16),
        text_config=dict(model_type="gemma", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, vocab_size=len(fast)),
        image_token_index=fast.convert_tokens_to_ids("<image>"), projection_dim=16, vocab_size=len(fast))
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("refvnli") / "refvnli"
    PaliGemmaForConditionalGeneration(cfg).eval().save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder


def test_mark_subject():
    assert refvnli.mark_subject("a photo of [V] leopard in the snow")[0] == "a photo of <u>[V] leopard</u> in the snow"
    assert refvnli.mark_subject("a red car", "red car")[0] == "a <u>red car</u>"
    assert refvnli.mark_subject("x <u>y</u>")[1] == "markup in the prompt"
    assert refvnli.mark_subject("a dog")[1].startswith("no subject markup")


def test_refvnli_on_a_tiny_checkpoint_matches_generate(tmp_path, tiny_checkpoint):
    from PIL import Image
    from transformers import AutoProcessor, PaliGemmaForConditionalGeneration

    refs = [str(write_image(tmp_path / f"r{k}.png", seed=k)) for k in range(2)]
    target = str(write_image(tmp_path / "t.png", seed=7))
    prompt = "a photo of [V] leopard in the snow"
    batch = QueryBatch(["q0", "q1"], [target, target], ["x"] * 2, ["g"] * 2, [prompt, None], [refs, refs],
                       device="cpu", options={"refvnli.model": str(tiny_checkpoint)})
    out = run_scorers(["refvnli"], batch).set_index(["query_id", "metric"])
    assert math.isnan(out.loc[("q1", "sp"), "value"]) and out.loc[("q1", "sp"), "note"] == "no prompt"
    assert "mean over 2 reference(s)" in out.loc[("q0", "sp"), "note"]

    proc = AutoProcessor.from_pretrained(tiny_checkpoint, local_files_only=True)
    net = PaliGemmaForConditionalGeneration.from_pretrained(tiny_checkpoint, local_files_only=True).eval()
    digits = [proc.tokenizer.convert_tokens_to_ids(t) for t in ("0", "1")]
    ta, sp = [], []
    for r in refs:
        inputs = proc(images=[[Image.open(r).convert("RGB"), Image.open(target).convert("RGB")]],
                      text=["<image><image>a photo of <u>[V] leopard</u> in the snow"], return_tensors="pt")
        inputs.pop("labels", None)
        gen = net.generate(**inputs, max_new_tokens=2, do_sample=False, output_scores=True,
                           return_dict_in_generate=True, prefix_allowed_tokens_fn=lambda b, ids: digits)
        probs = [torch.softmax(s[0].float(), dim=-1) for s in gen.scores]  # renormalised over the two digits
        ta.append(float(probs[0][digits[1]]))
        sp.append(float(probs[1][digits[1]]))
    assert out.loc[("q0", "ta"), "value"] == pytest.approx(np.mean(ta), abs=1e-5)
    assert out.loc[("q0", "sp"), "value"] == pytest.approx(np.mean(sp), abs=1e-5)


def test_missing_checkpoint_is_a_clear_error(tmp_path, monkeypatch):
    from fpr.scorers.refvnli import model as refvnli_model

    p = str(write_image(tmp_path / "a.png", seed=1))
    batch = QueryBatch(["q"], [p], ["x"], ["g"], ["a [V] dog"], [[p]], device="cpu",
                       options={"refvnli.model": str(tmp_path / "none")})
    with pytest.raises(NotFoundError, match="RefVNLI checkpoint folder") as e:
        run_scorers(["refvnli"], batch)
    assert "fpr refvnli train" in e.value.hint
    # the built-in model missing (a stripped install): the folder and the train command, one line
    monkeypatch.setattr(refvnli_model, "builtin_dir", lambda: tmp_path / "stripped")
    batch.options = {}
    with pytest.raises(NotFoundError, match="stripped") as e:
        run_scorers(["refvnli"], batch)
    assert "fpr refvnli train" in e.value.hint
