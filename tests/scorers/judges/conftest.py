"""A judge server on loopback per test module, the environment pointing the judge client at it, query batches."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fpr.scorers import QueryBatch
from fpr.scorers.judges.tools import GDINO_ID, OWLV2_ID
from tests.scorers.judges.server import API_KEY, MODELS, JudgeServer


@pytest.fixture(scope="module")
def server():
    with JudgeServer() as s:
        yield s


@pytest.fixture
def judge_env(server, monkeypatch):
    """OPENAI_BASE_URL/OPENAI_API_KEY/FPR_JUDGE_MODEL for the test server; faults and counts reset."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("FPR_JUDGE_MODEL", MODELS[0])
    server.faults.clear()
    server.reset()
    return server


def flat_image(path: Path, value, size: int = 32) -> str:
    """A uniform RGB image (``value`` a grey level or an RGB triple)."""
    arr = np.zeros((size, size, 3), dtype=np.uint8) + np.asarray(value, dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr, "RGB").save(path)
    return str(path)


def make_batch(tmp_path: Path, prompts: list[str | None], query_values: list, ref_values: list, *,
               workspace: Path | None = None, options: dict | None = None) -> QueryBatch:
    """Queries i: a flat image of grey ``query_values[i]`` with one flat reference of ``ref_values[i]``."""
    n = len(prompts)
    paths = [flat_image(tmp_path / "q" / f"{i}.png", query_values[i]) for i in range(n)]
    refs = [[flat_image(tmp_path / "r" / f"{i}.png", ref_values[i])] if ref_values[i] is not None else []
            for i in range(n)]
    return QueryBatch([f"q{i}" for i in range(n)], paths, [f"id{i}" for i in range(n)], ["g"] * n, prompts, refs,
                      options=dict(options or {}), workspace=workspace if workspace is not None else tmp_path / "ws")


def metric(df, query_id: str, name: str):
    row = df[(df["query_id"] == query_id) & (df["metric"] == name)]
    assert len(row) == 1, (query_id, name, df)
    return float(row["value"].iloc[0]), row["note"].iloc[0]


def _byte_chars() -> list[str]:
    """The 256 printable stand-ins byte-level BPE tokenizers use for bytes (as GPT-2/CLIP define them)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    extra = [b for b in range(256) if b not in keep]
    return [chr(c) for c in keep] + [chr(256 + k) for k in range(len(extra))]


def write_tiny_owlv2(folder: Path) -> Path:
    """A random-initialised OWLv2 (32 px, 1 layer per tower) saved with its processor, as Hugging Face lays it out."""
    import torch
    from transformers import CLIPTokenizer, Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor

    chars = _byte_chars()
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    vocab["<|startoftext|>"], vocab["<|endoftext|>"] = len(vocab), len(vocab) + 1
    tok_dir = folder.parent / "tok"
    tok_dir.mkdir(parents=True, exist_ok=True)
    (tok_dir / "vocab.json").write_text(json.dumps(vocab))
    (tok_dir / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(vocab_file=str(tok_dir / "vocab.json"), merges_file=str(tok_dir / "merges.txt"))
    config = Owlv2Config(
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=16, bos_token_id=vocab["<|startoftext|>"],
                         eos_token_id=vocab["<|endoftext|>"], pad_token_id=vocab["<|endoftext|>"]),
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2,
                           image_size=32, patch_size=8), projection_dim=32)
    torch.manual_seed(0)
    model = Owlv2ForObjectDetection(config).eval()
    model.save_pretrained(folder)
    Owlv2Processor(image_processor=Owlv2ImageProcessor(size={"height": 32, "width": 32}),
                   tokenizer=tokenizer).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_owlv2(tmp_path_factory) -> Path:
    return write_tiny_owlv2(tmp_path_factory.mktemp("owl") / OWLV2_ID)


def write_tiny_grounding_dino(folder: Path) -> Path:
    """A random-initialised GroundingDINO (Swin backbone, BERT text tower, 1-2 layers, 128 px) saved with its
    processor and a word-level BERT vocabulary, as Hugging Face lays it out. Its smallest feature level is
    2 x 2 (GroupNorm needs more than one value per group) and it has two decoder layers (the box heads are tied
    across layers)."""
    import torch
    from transformers import (BertTokenizer, GroundingDinoConfig, GroundingDinoForObjectDetection,
                              GroundingDinoImageProcessor, GroundingDinoProcessor)

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "a", "an", "animal", "dog", "zebra", "the"]
    vocab = folder.parent / "bert-vocab.txt"
    vocab.parent.mkdir(parents=True, exist_ok=True)
    vocab.write_text("\n".join(words + [c for c in "abcdefghijklmnopqrstuvwxyz" if c != "a"]) + "\n")
    tokenizer = BertTokenizer(str(vocab))
    config = GroundingDinoConfig(
        backbone_config=dict(model_type="swin", image_size=128, patch_size=4, embed_dim=8, depths=[1, 1, 1, 1],
                             num_heads=[1, 1, 1, 1], window_size=2, out_features=["stage2", "stage3", "stage4"]),
        text_config=dict(model_type="bert", vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=16, max_position_embeddings=32),
        d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=10, max_text_len=32, num_feature_levels=4)
    torch.manual_seed(0)
    GroundingDinoForObjectDetection(config).eval().save_pretrained(folder)
    GroundingDinoProcessor(image_processor=GroundingDinoImageProcessor(size={"shortest_edge": 128,
                                                                             "longest_edge": 128}),
                           tokenizer=tokenizer).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_grounding_dino(tmp_path_factory) -> Path:
    return write_tiny_grounding_dino(tmp_path_factory.mktemp("gdino") / GDINO_ID)
