"""Code2Wav's conv stack as a stream: each new frame costs one frame of convolution.

The stack (ConvNeXt upsampling, then SnakeBeta/ConvTranspose/residual decoder
blocks) is causal apart from one thing: each transposed conv (kernel 2r,
stride r, trimmed r on each side) makes output sample j from inputs j//r and
j//r + 1, so a stream of L inputs yields (L-1)*r outputs, all final. Run over a
whole utterance it therefore gives exactly what running it chunk by chunk
gives, if each layer keeps what it needs from the previous chunk:

- a causal conv keeps its last (k-1)*dilation inputs (zeros at the start,
  which is the padding the full-length forward adds);
- a transposed conv keeps its last input and re-runs it with the new ones,
  keeping the outputs that only now became complete.

So after the first frame (1365 samples: 555 are held back by the four
transposed convs) each frame yields exactly 1920 new, final samples, with no
re-run of earlier frames. The state of a stream is a dict of small tensors,
one per stateful layer; streams in the same phase batch by concatenating them.
"""

from __future__ import annotations

import torch
from torch import nn

State = dict[int, torch.Tensor]  # layer index in the walk -> its context [B, C, n]


class StreamingConvStack:
    """Runs `code2wav.upsample` and `code2wav.decoder` on new frames of pre-transformer output."""

    def __init__(self, code2wav: nn.Module) -> None:
        self.c2w = code2wav
        self._snake: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._snake_dtype: torch.dtype | None = None

    def _snake_factors(self, dtype: torch.dtype) -> None:
        """SnakeBeta's per-channel factors, e^alpha and 1 / (e^beta + eps), computed once per weight dtype (the
        module recomputes both exponentials on every call: a third of the stack's time on small frames)."""
        self._snake = {
            id(m): (
                torch.exp(m.alpha.detach()).view(1, -1, 1),
                1.0 / (torch.exp(m.beta.detach()).view(1, -1, 1) + m.no_div_by_zero),
            )
            for m in self.c2w.modules()
            if type(m).__name__.endswith("SnakeBeta")
        }
        self._snake_dtype = dtype

    def snake(self, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """SnakeBeta: x + sin(x * e^alpha)^2 / (e^beta + eps), in the module's own order of operations."""
        alpha, inv_beta = self._snake[id(m)]
        return x + inv_beta * torch.pow(torch.sin(x * alpha), 2)

    @torch.no_grad()
    def step(self, hidden: torch.Tensor, state: State) -> torch.Tensor:
        """hidden: [B, T, C] new pre-transformer outputs; state: updated in place. Returns [B, samples]."""
        if self._snake_dtype != hidden.dtype:  # built, or the weights were cast since
            self._snake_factors(hidden.dtype)
        walk = _Walk(state, self.snake)
        x = hidden.permute(0, 2, 1)
        for blocks in self.c2w.upsample:
            x = walk.trans_conv(blocks[0], x)
            x = walk.convnext(blocks[1], x)
        decoder = list(self.c2w.decoder)
        x = walk.conv(decoder[0], x)
        for block in decoder[1:-2]:
            for part in block.block:
                kind = type(part).__name__
                if kind.endswith("TransConvNet"):
                    x = walk.trans_conv(part, x)
                elif kind.endswith("ResidualUnit"):
                    x = walk.residual(part, x)
                else:
                    x = self.snake(part, x)
        x = self.snake(decoder[-2], x)
        x = walk.conv(decoder[-1], x)
        return x.clamp(min=-1, max=1)[:, 0]


def stack_states(states: list[State]) -> State:
    """Streams of the same phase (same keys, same shapes) as one batch."""
    if not states[0]:
        return {}
    return {k: torch.cat([s[k] for s in states]) for k in states[0]}


def split_state(batch: State, n: int) -> list[State]:
    parts: list[State] = [{} for _ in range(n)]
    for k, v in batch.items():
        for i, row in enumerate(v.split(1)):
            parts[i][k] = row
    return parts


class _Walk:
    """One pass over the stack: stateful layers are numbered in the order they run."""

    def __init__(self, state: State, snake) -> None:
        self.state = state
        self.snake = snake
        self.i = 0

    def _key(self) -> int:
        self.i += 1
        return self.i

    def conv(self, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """A causal conv (stride 1): its left context is the previous inputs, zeros at the start."""
        key, ctx = self._key(), m.padding
        if ctx == 0:
            return m.conv(x)
        prev = self.state.get(key)
        if prev is None:
            prev = x.new_zeros(x.shape[0], x.shape[1], ctx)
        z = torch.cat([prev, x], dim=-1)
        self.state[key] = z[..., -ctx:]
        return m.conv(z)

    def trans_conv(self, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """A transposed conv, kernel r (stateless) or 2r trimmed r each side (one input of context)."""
        key = self._key()
        r = m.conv.stride[0]
        if m.left_pad == 0:
            return m.conv(x)
        if m.left_pad != r or m.right_pad != r:
            raise ValueError(f"a transposed conv trimmed {m.left_pad}/{m.right_pad} with stride {r} cannot stream")
        prev = self.state.get(key)
        z = x if prev is None else torch.cat([prev, x], dim=-1)
        self.state[key] = x[..., -1:]
        return m.conv(z)[..., r : z.shape[-1] * r]

    def convnext(self, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(m.dwconv, x).permute(0, 2, 1)
        h = m.pwconv2(m.act(m.pwconv1(m.norm(h))))
        return x + (m.gamma * h).permute(0, 2, 1)

    def residual(self, m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(m.conv1, self.snake(m.act1, x))
        return x + self.conv(m.conv2, self.snake(m.act2, h))
