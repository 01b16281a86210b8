"""Where eager and graphed Code2Wav samples part, frame by frame, and how far the conv stack carries a rounding.

The device check's graphs-against-eager comparison found the tiny model's samples 0.70 apart on an H200 with
identical tokens and codes (and the captured steps identical to the same steps uncaptured). This tells a graph
fault (samples apart from one frame on, whatever the batch) from float sensitivity (eager batched against eager
alone just as far apart; a 1e-7 nudge of the conv stack's input moving samples as much):

    python -m benchmarks.device.code2wav_precision --device cuda [--fp32 default|top|ieee]

`--fp32 top` sets only `torch.backends.fp32_precision = "ieee"` (cuDNN's convolutions stay on TF32 in torch 2.11);
`ieee` also sets the convolutions and matmuls. Prints the settings, the three agreements and per session the max
sample difference of each frame (the first frame, then each 1920 samples).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def per_frame(x: np.ndarray, y: np.ndarray, first: int) -> list[str] | str:
    if x.shape != y.shape:
        return f"shapes {x.shape} {y.shape}"
    d = np.abs(x - y)
    return [
        f"{v:.1e}"
        for v in [float(d[:first].max(initial=0))] + [float(d[s : s + 1920].max()) for s in range(first, len(d), 1920)]
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--fp32", choices=["default", "top", "ieee"], default="default")
    args = ap.parse_args(argv)

    import torch

    import benchmarks.qwen3_omni as bench
    from agent.engines.qwen3_omni.code2wav import StreamingConvStack
    from agent.engines.qwen3_omni.loading import load
    from agent.engines.qwen3_omni.stream import OmniStreamer, first_frame_samples
    from agent.engines.qwen3_omni.tiny import build_tiny_model

    torch.set_grad_enabled(False)
    if args.fp32 == "top":
        torch.backends.fp32_precision = "ieee"
    elif args.fp32 == "ieee":
        bench.ieee_float32()
    dev = args.device
    model = load(str(build_tiny_model(Path(tempfile.mkdtemp()) / "tiny")), device=dev).model.float()
    first = first_frame_samples(model.code2wav.config)

    n = args.sessions
    eager = bench.staggered(model, OmniStreamer(model, graphs=False), n, dev)
    plain = OmniStreamer(model, graphs=True)
    plain.graphs.capture = False  # on CUDA the captured steps equal these to the bit (the device check shows it)
    graphed = bench.staggered(model, plain, n, dev)
    solo = [bench.staggered(model, OmniStreamer(model, graphs=False), n, dev, only=i)[0] for i in range(n)]  # alone
    print(
        "settings",
        torch.backends.fp32_precision,
        torch.backends.cudnn.conv.fp32_precision,
        torch.backends.cuda.matmul.fp32_precision,
    )
    print("eager vs graphed(uncaptured)", bench._agreement(eager, graphed))
    print("eager batched vs eager alone", bench._agreement(eager, solo))
    print("graphed vs eager alone", bench._agreement(graphed, solo))
    for i in range(n):
        print(i, "frames", len(eager[i]["codes"]), "amp", float(np.abs(eager[i]["samples"]).max()))
        print("  eager-graphed", per_frame(eager[i]["samples"], graphed[i]["samples"], first))
        print("  eager-alone  ", per_frame(eager[i]["samples"], solo[i]["samples"], first))

    stack = StreamingConvStack(model.code2wav)
    g = torch.Generator(device="cpu").manual_seed(0)
    hidden = torch.randn(1, 12, model.code2wav.config.hidden_size, generator=g).to(dev)
    for eps in (1e-7, 1e-6, 1e-5):
        outs = []
        for h in (hidden, hidden * (1 + eps * torch.randn(hidden.shape, generator=g).to(dev))):
            state: dict = {}
            outs.append(torch.cat([stack.step(h[:, t : t + 1], state) for t in range(h.shape[1])], -1))
        print(f"conv stack, hidden x(1+{eps:g} noise): max sample diff {float((outs[0] - outs[1]).abs().max()):.2e}")


if __name__ == "__main__":
    main()
