"""Load Qwen3-Omni from a local folder (or a hub id where the machine has a network), with clear errors.

bf16 with flash-attention 2 on a GPU when flash-attn is installed, sdpa
otherwise; float32 on the CPU. Tokenizer, feature extractor and image processor
come from the same folder. Every way this can fail before inference (no folder,
files missing, not enough GPU memory, no network for a hub id) is a
`ModelLoadError` with one sentence that says what to do.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

NEEDED = ("config.json", "tokenizer_config.json", "preprocessor_config.json")
GPU_HEADROOM = 1.15  # weights plus room for caches and activations


class ModelLoadError(RuntimeError):
    """The model cannot be loaded; the message says why and what to do."""


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    feature_extractor: Any
    image_processor: Any
    device: Any
    dtype: Any
    attn: str
    folder: Path
    seconds: float


def resolve(path: str) -> Path:
    """A local folder as is; a hub id ("org/name") downloaded once where a network exists."""
    folder = Path(path).expanduser()
    if folder.exists():
        if not folder.is_dir():
            raise ModelLoadError(f"model path {folder} is a file; give the folder that holds config.json")
        return folder
    if path.count("/") == 1 and not path.startswith((".", "/", "~")):
        if os.environ.get("HF_HUB_OFFLINE") == "1":
            raise ModelLoadError(f"model {path!r} is not a local folder and HF_HUB_OFFLINE=1 forbids a download")
        try:
            from huggingface_hub import snapshot_download

            print(f"downloading {path} from the Hugging Face hub ...", flush=True)
            return Path(snapshot_download(path))
        except Exception as exc:
            raise ModelLoadError(
                f"model {path!r} is not a local folder and could not be downloaded ({type(exc).__name__}); "
                "download it on a machine with a network and pass --model /path/to/folder"
            ) from exc
    raise ModelLoadError(f"model folder {folder} does not exist; pass --model with a local Qwen3-Omni folder")


def check_folder(folder: Path) -> dict:
    missing = [name for name in NEEDED if not (folder / name).is_file()]
    if not any(folder.glob("*.safetensors")) and not (folder / "model.safetensors.index.json").is_file():
        missing.append("*.safetensors (the weights)")
    if missing:
        raise ModelLoadError(f"model folder {folder} is incomplete: missing {', '.join(missing)}")
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{folder / 'config.json'} is not readable JSON: {exc}") from exc
    if config.get("model_type") != "qwen3_omni_moe":
        raise ModelLoadError(
            f"{folder} holds a {config.get('model_type')!r} model, not Qwen3-Omni (model_type qwen3_omni_moe)"
        )
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        absent = sorted(s for s in shards if not (folder / s).is_file())
        if absent:
            raise ModelLoadError(
                f"model folder {folder} is incomplete: {len(absent)} weight shard(s) missing, e.g. {absent[0]}"
            )
    return config


def weight_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def check_gpu_memory(need: int, free: int, total: int) -> None:
    if need * GPU_HEADROOM > free:
        raise ModelLoadError(
            f"not enough GPU memory: the weights take {need / 2**30:.1f} GiB (+15 % for caches), "
            f"{free / 2**30:.1f} GiB of {total / 2**30:.1f} GiB is free"
        )


def load(
    path: str,
    device: str | None = None,
    talker: bool = True,
    progress: bool = True,
) -> LoadedModel:
    import torch
    from transformers import AutoTokenizer, Qwen3OmniMoeForConditionalGeneration, WhisperFeatureExtractor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    t0 = time.perf_counter()
    folder = resolve(path)
    check_folder(folder)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ModelLoadError("--device cuda was asked for but torch sees no GPU")
        free, total = torch.cuda.mem_get_info()
        check_gpu_memory(weight_bytes(folder), free, total)
        dtype = torch.bfloat16
        attn = "flash_attention_2" if importlib.util.find_spec("flash_attn") else "sdpa"
    else:
        dtype, attn = torch.float32, "sdpa"
    if progress:
        size = weight_bytes(folder) / 2**30
        print(f"loading Qwen3-Omni from {folder} ({size:.2f} GiB) on {device}, {dtype}, {attn} ...", flush=True)
    try:
        # On a GPU the weights go straight to it (device_map, through accelerate); on the CPU they stay put.
        placement = {"device_map": device} if device != "cpu" else {}
        model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(
            folder, dtype=dtype, attn_implementation=attn, **placement
        ).eval()
        if not talker:
            model.disable_talker()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        features = WhisperFeatureExtractor.from_pretrained(folder)
        images = Qwen2VLImageProcessorPil.from_pretrained(folder)
    except torch.cuda.OutOfMemoryError as exc:
        raise ModelLoadError(f"not enough GPU memory to load {folder}: {exc}") from exc
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"could not load {folder}: {type(exc).__name__}: {exc}") from exc
    seconds = time.perf_counter() - t0
    if progress:
        print(f"Qwen3-Omni loaded in {seconds:.1f} s", flush=True)
    return LoadedModel(model, tokenizer, features, images, torch.device(device), dtype, attn, folder, seconds)
