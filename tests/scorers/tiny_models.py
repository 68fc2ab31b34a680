"""Tiny random-initialised models in the real transformers layouts (``save_pretrained`` folders) for the
VISTAR scorers' model paths: the scorer tests and the ``fpr vistar run`` test load them as a user's local
folders would be loaded."""
from __future__ import annotations

from pathlib import Path


def write_psc_models(root: Path) -> Path:
    """``root/seg`` (Mask2Former, Swin backbone, 3 labels) and ``root/depth`` (DPT)."""
    import torch
    from transformers import (DPTConfig, DPTForDepthEstimation, DPTImageProcessor, Mask2FormerConfig,
                              Mask2FormerForUniversalSegmentation, Mask2FormerImageProcessor, SwinConfig)

    torch.manual_seed(0)
    swin = SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=[1, 1, 1, 1], num_heads=[1, 1, 1, 1],
                      window_size=4, out_features=["stage1", "stage2", "stage3", "stage4"])
    labels = {0: "person", 1: "chair", 2: "table"}
    seg = Mask2FormerConfig(backbone_config=swin, hidden_dim=32, mask_feature_size=32, feature_size=32,
                            encoder_layers=1, decoder_layers=2, num_attention_heads=2, dim_feedforward=32,
                            encoder_feedforward_dim=32, num_queries=5, num_labels=3, common_stride=4,
                            id2label=labels, label2id={v: k for k, v in labels.items()})
    Mask2FormerForUniversalSegmentation(seg).eval().save_pretrained(root / "seg")
    Mask2FormerImageProcessor(size={"height": 64, "width": 64}).save_pretrained(root / "seg")
    dpt = DPTConfig(hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32, image_size=32,
                    patch_size=8, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[8, 8, 8, 8],
                    fusion_hidden_size=8, head_in_index=-1)
    DPTForDepthEstimation(dpt).eval().save_pretrained(root / "depth")
    DPTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(root / "depth")
    return root


def write_cpa_models(root: Path) -> Path:
    """``root/det`` (DETR: labels N/A, person, dog), ``root/pose`` (ViTPose), ``root/expr`` (ViT expressions)."""
    import torch
    from transformers import (DetrConfig, DetrForObjectDetection, DetrImageProcessor, ResNetConfig, ViTConfig,
                              ViTForImageClassification, ViTImageProcessor, VitPoseBackboneConfig, VitPoseConfig,
                              VitPoseForPoseEstimation, VitPoseImageProcessor)

    torch.manual_seed(0)
    det = DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False,
                     backbone_config=ResNetConfig(embedding_size=8, hidden_sizes=[8, 8, 8, 8], depths=[1, 1, 1, 1],
                                                  out_features=["stage4"]),
                     d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, num_queries=6,
                     id2label={0: "N/A", 1: "person", 2: "dog"}, label2id={"N/A": 0, "person": 1, "dog": 2})
    DetrForObjectDetection(det).eval().save_pretrained(root / "det")
    DetrImageProcessor(size={"shortest_edge": 64, "longest_edge": 64}).save_pretrained(root / "det")
    pose = VitPoseConfig(backbone_config=VitPoseBackboneConfig(image_size=[64, 48], patch_size=[16, 16], hidden_size=16,
                                                               num_hidden_layers=1, num_attention_heads=2,
                                                               intermediate_size=32, out_indices=[1]), num_labels=17)
    VitPoseForPoseEstimation(pose).eval().save_pretrained(root / "pose")
    VitPoseImageProcessor(size={"height": 64, "width": 48}).save_pretrained(root / "pose")
    labels = {0: "Angry", 1: "Happy", 2: "Neutral", 3: "Contempt"}  # 'Contempt' is outside the lexicon
    expr = ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, num_labels=4, id2label=labels, label2id={v: k for k, v in labels.items()})
    ViTForImageClassification(expr).eval().save_pretrained(root / "expr")
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(root / "expr")
    return root
