"""The Talker's code predictor (MTP) as one fixed-shape step: codebooks 1-15 of a frame.

`model.generate` runs the predictor through `generate()` once per frame: 15
forwards, each building masks, a fresh dynamic cache and rotary tables, with
a host sync per token. Here one call does the whole frame with no
data-dependent Python control flow and no host sync: a 17-slot key/value
buffer per layer (allocated once per batch size and reused), rotary tables and
causal masks computed once, argmax and embedding lookups on the device. So the
step is the same sequence of kernels every frame: what a CUDA graph captures
(one per batch size) on a GPU, and one graph for `torch.compile(fullgraph=True)`
(tested on the CPU, where it otherwise runs eagerly). The math is the predictor's own modules called in its order; the
codes equal `generate`'s (tests/agent/engines/qwen3_omni/test_stream.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ResidualPredictor:
    """Codebooks 1..G-1 of a batch of frames from the Talker's hidden state and codebook 0."""

    def __init__(self, talker: nn.Module) -> None:
        predictor = talker.code_predictor
        self.model = predictor.model
        self.heads = predictor.lm_head
        self.embeds = predictor.model.codec_embedding  # one table per residual codebook
        self.first_embed = talker.get_input_embeddings()  # codebook 0 lives in the Talker's table
        cfg = predictor.config
        self.groups = cfg.num_code_groups
        self.slots = self.groups + 1  # hidden state, codebook 0, then codebooks 1..G-2 fed back
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scale = self.head_dim**-0.5
        weight = self.heads[0].weight
        positions = torch.arange(self.slots, device=weight.device)[None]
        probe = torch.zeros(1, 1, 1, device=weight.device, dtype=weight.dtype)
        cos, sin = self.model.rotary_emb(probe, positions)  # [1, slots, head_dim]
        self.cos, self.sin = cos[0], sin[0]
        self.causal = torch.ones(self.slots, self.slots, dtype=torch.bool, device=weight.device).tril()
        self._buffers: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def buffers(self, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer key and value slots for `batch` frames; reused, never reallocated."""
        if batch not in self._buffers:
            w = self.heads[0].weight
            shape = (batch, self.kv_heads, self.slots, self.head_dim)
            self._buffers[batch] = [(w.new_zeros(shape), w.new_zeros(shape)) for _ in range(len(self.model.layers))]
        return self._buffers[batch]

    @torch.no_grad()
    def __call__(self, hidden: torch.Tensor, code0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [B, 1, d], code0 [B] -> codes [B, G] and the sum of the G code embeddings [B, d]."""
        kv = self.buffers(hidden.shape[0])
        first = self.first_embed(code0[:, None])  # [B, 1, d]
        x = torch.cat([hidden, first], dim=1)
        codes, total = [code0], first[:, 0]
        start = 0
        for step in range(self.groups - 1):  # static: unrolled the same way every frame
            out = self._forward(x, start, kv)
            start += x.shape[1]
            code = torch.argmax(self.heads[step](out[:, -1]), dim=-1)
            codes.append(code)
            x = self.embeds[step](code[:, None])
            total = total + x[:, 0]
        return torch.stack(codes, dim=1), total

    def _forward(self, x: torch.Tensor, start: int, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """The predictor's layers on positions start..start+T-1, attending over all slots up to each position."""
        b, t, _ = x.shape
        cos = self.cos[start : start + t][None, None]
        sin = self.sin[start : start + t][None, None]
        mask = self.causal[start : start + t]  # [T, slots]: a slot not yet written is masked
        for layer, (keys, values) in zip(self.model.layers, kv, strict=True):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            shape = (b, t, -1, self.head_dim)
            q = attn.q_norm(attn.q_proj(h).view(shape)).transpose(1, 2)
            k = attn.k_norm(attn.k_proj(h).view(shape)).transpose(1, 2)
            v = attn.v_proj(h).view(shape).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            keys[:, :, start : start + t] = k
            values[:, :, start : start + t] = v
            a = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=True)
            x = x + attn.o_proj(a.transpose(1, 2).reshape(b, t, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.model.norm(x)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
