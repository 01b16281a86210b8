"""Turn prompts for the Thinker: chat-template text with audio and image placeholders, and their features.

Built by hand rather than with `Qwen3OmniMoeProcessor`, whose constructor
insists on a video processor that needs torchvision (which cannot sit beside
the CPU torch build); the placeholder counts come from the model's own
functions, so they always match what the encoders produce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agent.engines.qwen3_omni.stream import TurnInput

SAMPLE_RATE = 16_000


def audio_tokens(feature_frames: int, n_window: int = 50) -> int:
    """Audio tokens the encoder makes of `feature_frames` log-mel frames (13 per second)."""
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import _get_feat_extract_output_lengths

    return int(_get_feat_extract_output_lengths(torch.tensor(feature_frames), n_window))


@dataclass
class Prompter:
    tokenizer: Any
    feature_extractor: Any
    image_processor: Any | None
    device: torch.device | str = "cpu"
    n_window: int = 50
    merge_size: int = 2

    def text_ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def system(self, text: str) -> list[int]:
        return self.text_ids(f"<|im_start|>system\n{text}<|im_end|>\n")

    def turn(
        self,
        *,
        audio: np.ndarray | None = None,
        images: list[np.ndarray] | None = None,
        text: str | None = None,
        system: str | None = None,
    ) -> TurnInput:
        """One user turn, ending with the assistant's opening; `system` opens a conversation with it."""
        ids: list[int] = self.system(system) if system is not None else []
        ids += self.text_ids("<|im_start|>user\n")
        pixel_values = grid = None
        if images:
            processed = self.image_processor(images=images, return_tensors="pt")
            pixel_values, grid = processed["pixel_values"], processed["image_grid_thw"]
            for g in grid:
                n = int(g.prod()) // self.merge_size**2
                ids += self.text_ids("<|vision_start|>" + "<|image_pad|>" * n + "<|vision_end|>")
        features = feature_mask = None
        if audio is not None and len(audio):
            feats = self.feature_extractor(
                audio.astype(np.float32),
                sampling_rate=SAMPLE_RATE,
                return_attention_mask=True,
                padding="longest",
                truncation=False,
                return_tensors="pt",
            )
            features, feature_mask = feats["input_features"], feats["attention_mask"]
            n = audio_tokens(int(feature_mask.sum()), self.n_window)
            ids += self.text_ids("<|audio_start|>" + "<|audio_pad|>" * n + "<|audio_end|>")
        if text:
            ids += self.text_ids(text)
        ids += self.text_ids("<|im_end|>\n<|im_start|>assistant\n")
        dev = self.device

        def to(t):
            return None if t is None else t.to(dev)

        return TurnInput(ids, to(features), to(feature_mask), to(pixel_values), to(grid))


def join(prefix: list[int], parts: list[TurnInput | list[int]]) -> TurnInput:
    """Token runs and turns as one Thinker input (a conversation re-read after its oldest turns were cut)."""
    ids = list(prefix)
    feats, masks, pixels, grids = [], [], [], []
    for part in parts:
        if isinstance(part, list):
            ids += part
            continue
        ids += part.ids
        if part.input_features is not None:
            feats.append(part.input_features)
            masks.append(part.feature_attention_mask)
        if part.pixel_values is not None:
            pixels.append(part.pixel_values)
            grids.append(part.image_grid_thw)
    features = mask = None
    if feats:
        frames = max(f.shape[-1] for f in feats)
        features = torch.cat([torch.nn.functional.pad(f, (0, frames - f.shape[-1])) for f in feats])
        mask = torch.cat([torch.nn.functional.pad(m, (0, frames - m.shape[-1])) for m in masks])
    return TurnInput(ids, features, mask, torch.cat(pixels) if pixels else None, torch.cat(grids) if grids else None)
