"""The device check's first step: versions, the GPU and the engine's imports, before any model is built.

Every check runs (one go shows every problem); exits 1 if any failed. A missing or wrong dependency then
fails in seconds, not after building a 30B model.

    python benchmarks/device/preflight.py --target DIR --env-json OUT/device-env.json

--target: where check.sh installed the pinned wheels; each must be imported from there.
--no-gpu: a rehearsal on a CPU machine (the tests run it): the GPU checks are skipped, the Python floor and the
pins are reported, not enforced; the imports and the full config are checked as on the device.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MIN_PYTHON = (3, 12)
TRANSFORMERS_SERIES = "5.24."
MIN_TORCH = (2, 6)  # transformers 5.24's floor

failures: list[str] = []
env: dict[str, object] = {}


def check(name: str, fn) -> object:
    t0 = time.perf_counter()
    try:
        detail = fn()
    except BaseException as exc:  # an import can raise anything (SystemExit too): report it, go on
        failures.append(name)
        print(f"FAIL {name}: {type(exc).__name__}: {exc}", flush=True)
        env[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return None
    print(f"ok   {name}: {detail} ({time.perf_counter() - t0:.1f} s)", flush=True)
    env[name] = {"ok": True, "detail": detail}
    return detail


def pins() -> list[tuple[str, str, str]]:
    """(distribution, version, when) from wheels.txt."""
    out = []
    for line in (HERE / "wheels.txt").read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if fields:
            name, _, version = fields[0].partition("==")
            out.append((name, version, fields[1]))
    return out


def version_tuple(v: str) -> tuple[int, ...]:
    nums = []
    for part in v.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        nums.append(int(digits or 0))
    return tuple(nums)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", help="the private folder the wheels were installed into")
    ap.add_argument("--env-json", help="write what was found here")
    ap.add_argument("--no-gpu", action="store_true", help="a CPU rehearsal: GPU checks skipped, pins reported")
    args = ap.parse_args()
    target = Path(args.target).resolve() if args.target else None
    strict = not args.no_gpu
    if not strict:
        print("preflight --no-gpu: a rehearsal on this machine; the GPU checks are skipped", flush=True)

    def python():
        if strict and sys.version_info[:2] < MIN_PYTHON:
            raise RuntimeError(f"Python {platform.python_version()} < {'.'.join(map(str, MIN_PYTHON))}")
        return f"{platform.python_version()} ({sys.executable})"

    check("python", python)

    # The pinned wheels: the version asked for, loaded from the target (not the machine's own older copy).
    for dist, version, when in pins():

        def pinned(dist=dist, version=version, when=when):
            try:
                d = md.distribution(dist)
            except md.PackageNotFoundError:
                raise RuntimeError(f"{dist} is not installed ({when})") from None
            where = Path(str(d.locate_file(""))).resolve()
            if not strict:
                return f"{d.version} from {where} (the device gets {version})"
            if when == "always" and d.version != version:
                raise RuntimeError(f"{dist} {d.version} found at {where}, {version} expected")
            if when == "always" and target and where != target:
                raise RuntimeError(f"{dist} {d.version} is loaded from {where}, not from the target {target}")
            return f"{d.version} from {where}"

        check(f"wheel {dist}", pinned)

    def transformers():
        import transformers as t

        if not t.__version__.startswith(TRANSFORMERS_SERIES):
            raise RuntimeError(f"transformers {t.__version__} at {t.__file__}; {TRANSFORMERS_SERIES}x is needed")
        return f"{t.__version__} at {Path(t.__file__).parent}"

    check("transformers", transformers)

    def torch_version():
        import torch

        if version_tuple(torch.__version__) < MIN_TORCH:
            raise RuntimeError(f"torch {torch.__version__} < {'.'.join(map(str, MIN_TORCH))}")
        return f"{torch.__version__}, CUDA build {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"

    check("torch", torch_version)

    def soxr():
        import numpy as np
        import soxr as s

        y = s.resample(np.zeros(960, np.float32), 48000, 16000)
        assert y.shape == (320,), y.shape
        return f"{s.__version__} (numpy {np.__version__}); 48k->16k resample ok"

    check("soxr", soxr)

    def pil():
        import PIL

        return PIL.__version__

    check("PIL", pil)

    def cuda():
        import torch

        if not strict:
            return "skipped (--no-gpu)"
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"torch.cuda.is_available() is False (torch {torch.__version__}, CUDA build {torch.version.cuda}, "
                f"{torch.cuda.device_count()} devices): this check needs the GPU machine"
            )
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
        float((a @ a).float().sum())  # the GPU computes, not just answers
        env["gpu"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "total_gib": round(total / 2**30, 1),
            "free_gib": round(free / 2**30, 1),
            "count": torch.cuda.device_count(),
        }
        return (
            f"{props.name}, sm_{props.major}{props.minor}, {free / 2**30:.1f} of {total / 2**30:.1f} GiB free, "
            f"{torch.cuda.device_count()} device(s); bf16 matmul ok"
        )

    check("cuda", cuda)

    def graphs():
        """What the engine's graphed steps need: a capture and replay, and grouped_mm for the MoE experts."""
        import torch
        import torch.nn.functional as F

        if not strict:
            return "skipped (--no-gpu)"
        x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x @ x
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = x @ x
        x.mul_(2)
        graph.replay()
        if not torch.allclose(y.float(), (x @ x).float(), rtol=1e-2, atol=1e-2):
            raise RuntimeError("a replayed graph did not see its input change")
        grouped = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
        if grouped is None:
            raise RuntimeError(f"torch {torch.__version__} has no grouped_mm: the MoE layers would sync the host")
        w = torch.randn(4, 64, 32, device="cuda", dtype=torch.bfloat16)
        offs = torch.tensor([16, 32, 48, 64], device="cuda", dtype=torch.int32)
        out = grouped(x, w, offs=offs)
        return f"capture and replay ok; {grouped.__module__}.{grouped.__name__} {tuple(out.shape)}"

    check("cuda graphs", graphs)

    # The engine and everything the benchmark touches, imported before any model is built.
    for module in ("media.pcm", "agent.engines.qwen3_omni.engine", "benchmarks.qwen3_omni"):
        check(f"import {module}", lambda module=module: Path(importlib.import_module(module).__file__).name)

    def classes():
        from transformers import (  # noqa: F401 - what full_random, tiny and load use
            DynamicCache,
            PreTrainedTokenizerFast,
            Qwen3OmniMoeConfig,
            Qwen3OmniMoeForConditionalGeneration,
            WhisperFeatureExtractor,
        )
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
        from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (  # noqa: F401
            _get_feat_extract_output_lengths,
        )

        Qwen2VLImageProcessorPil()  # raises here if its PIL backend is missing
        from benchmarks.qwen3_omni import FULL_CONFIG

        config = Qwen3OmniMoeConfig(**json.loads(FULL_CONFIG.read_text()))
        tc = config.thinker_config.text_config
        return (
            f"Qwen3-Omni classes ok; full config: Thinker {tc.num_hidden_layers} layers, "
            f"{tc.num_experts} experts, hidden {tc.hidden_size}"
        )

    check("transformers classes + full config", classes)

    env["failures"] = failures
    if args.env_json:
        Path(args.env_json).write_text(json.dumps(env, indent=1, default=str))
    if failures:
        print(f"preflight: {len(failures)} check(s) failed: {', '.join(failures)}", flush=True)
        sys.exit(1)
    print("preflight: all checks passed", flush=True)


if __name__ == "__main__":
    if str(REPO) not in sys.path:  # check.sh puts it on PYTHONPATH; this covers a direct run
        sys.path.insert(1, str(REPO))
    main()
