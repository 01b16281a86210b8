"""A tiny, randomly initialised Qwen3-Omni in a local folder, laid out like the real one.

Tests, the CPU benchmark and demos need the engine's real loading and inference
code without weights from a hub: this writes config, safetensors, a byte-level
tokenizer with Qwen's special tokens and chat template, and the feature
extractor and image processor settings. The architecture keeps every part of
the published one (audio and vision towers, MoE Thinker and Talker, the MTP,
Code2Wav with its real upsampling, so one codec frame is still 1920 samples).

    python -m agent.engines.qwen3_omni.tiny PATH [--seed N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
]
# Whole-word tokens so that "<|im_start|>assistant\n" is three tokens, as the Talker's prompt layout assumes.
ROLES = ["system", "user", "assistant"]
TEXT_VOCAB = 320  # 256 bytes + specials + roles, rounded up
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(folder: Path):
    """A byte-level BPE without merges: every byte one token, then the special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL,
    )
    fast.add_tokens(ROLES)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def tiny_config_dict(ids: dict[str, int], fast: bool = False) -> dict:
    """The published config's structure with every size cut down. `fast` cuts what sets the per-frame cost
    (one layer per transformer, 4 codebooks instead of 16, two decoder blocks instead of four, same 1920
    samples a frame) for tests that judge real-time behaviour on a slow CPU."""
    layers, code_groups = (1, 4) if fast else (2, 16)
    text = {
        "vocab_size": TEXT_VOCAB,
        "hidden_size": 64,
        "intermediate_size": 64,
        "moe_intermediate_size": 32,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "shared_expert_intermediate_size": 0,
        "norm_topk_prob": True,
        "use_qk_norm": True,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1000000,
            "interleaved": True,
            "mrope_interleaved": True,
            "mrope_section": [2, 3, 3],
        },
    }
    audio = {
        "num_mel_bins": 128,
        "d_model": 32,
        "encoder_layers": 2,
        "encoder_attention_heads": 4,
        "encoder_ffn_dim": 64,
        "downsample_hidden_size": 16,
        "output_dim": 64,
        "n_window": 50,
        "n_window_infer": 800,
        "conv_chunksize": 500,
        "max_source_positions": 1500,
        "scale_embedding": False,
        "activation_function": "gelu",
    }
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 4,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 64,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [1],
        "apply_vit_abs_pos_embed": True,
        "hidden_act": "gelu_pytorch_tanh",
        "tokens_per_second": 2,
    }
    talker_text = {
        "vocab_size": 1024 + 64,  # 64 codes, then the control range
        "hidden_size": 32,
        "intermediate_size": 64,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "norm_topk_prob": True,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1000000,
            "interleaved": True,
            "mrope_section": [2, 1, 1],
        },
    }
    predictor = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "num_code_groups": code_groups,
        "max_position_embeddings": 64,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000},
    }
    codec_base = (
        1024  # codec control ids above the 64 codes, below the suppressed top 1024... kept as in the real layout
    )
    mm = {
        "audio_token_id": ids["<|audio_pad|>"],
        "audio_start_token_id": ids["<|audio_start|>"],
        "audio_end_token_id": ids["<|audio_end|>"],
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "position_id_per_seconds": 13,
        "seconds_per_chunk": 2,
    }
    return {
        "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
        "model_type": "qwen3_omni_moe",
        "enable_audio_output": True,
        "im_start_token_id": ids["<|im_start|>"],
        "im_end_token_id": ids["<|im_end|>"],
        "system_token_id": ids["system"],
        "user_token_id": ids["user"],
        "assistant_token_id": ids["assistant"],
        "tts_pad_token_id": ids["<tts_pad>"],
        "tts_bos_token_id": ids["<tts_text_bos>"],
        "tts_eos_token_id": ids["<tts_text_eod>"],
        "thinker_config": {
            **mm,
            "vision_end_token_id": ids["<|vision_end|>"],
            "user_token_id": ids["user"],
            "text_config": text,
            "audio_config": audio,
            "vision_config": vision,
        },
        "talker_config": {
            **mm,
            "accept_hidden_layer": 1,
            "thinker_hidden_size": 64,
            "num_code_groups": code_groups,
            "spatial_merge_size": 2,
            "text_config": talker_text,
            "code_predictor_config": predictor,
            # Control codes sit in the top 1024 ids (suppressed for sampling) except codec EOS, as in the real one.
            "codec_pad_id": codec_base + 1,
            "codec_bos_id": codec_base + 2,
            "codec_eos_token_id": codec_base + 3,
            "codec_nothink_id": codec_base + 4,
            "codec_think_bos_id": codec_base + 5,
            "codec_think_eos_id": codec_base + 6,
            "speaker_id": {"chelsie": codec_base + 10, "ethan": codec_base + 11, "aiden": codec_base + 12},
        },
        "code2wav_config": {
            "codebook_size": 64,
            "num_quantizers": code_groups,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": layers,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "decoder_dim": 32,
            "sliding_window": 72,
            "upsample_rates": [16, 30] if fast else [8, 5, 4, 3],
            "upsampling_ratios": [4] if fast else [2, 2],
            "layer_scale_initial_scale": 0.01,
            "max_position_embeddings": 8000,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000},
        },
    }


def init_random(model, seed: int) -> None:
    """Deterministic random weights everywhere, including what `_init_weights` leaves empty (talker experts)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or name.endswith(".alpha") or name.endswith(".beta")):
                continue  # keep norms at one and SnakeBeta at its init: a stable signal path
            if name.endswith(".gamma") or name.endswith("scale"):
                continue
            if name.startswith("code2wav.") and p.dim() > 1 and "embedding" not in name:
                std = p[0].numel() ** -0.5  # variance-keeping, so the waveform depends on the codes
            elif name.startswith("code2wav.") and p.dim() == 1:
                std = 0.0
            else:
                std = 0.02 if p.dim() > 1 else 0.01
            p.copy_(torch.randn(p.shape, generator=gen) * std)
        # Codec embeddings need spread for distinct codes to give distinct frames.
        talker = model.talker
        talker.model.codec_embedding.weight.mul_(10)


def build_tiny_model(folder: str | Path, seed: int = 0, fast: bool = False) -> Path:
    """Write a complete tiny model folder; returns it. By default the frame layout is the published one (16
    codebooks, four decoder blocks); `fast` speaks several times faster than real time even on a slow CPU."""
    import torch
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration, WhisperFeatureExtractor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(folder)
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIAL + ROLES}
    config = Qwen3OmniMoeConfig(**tiny_config_dict(ids, fast))
    torch.manual_seed(seed)
    model = Qwen3OmniMoeForConditionalGeneration(config).eval()
    init_random(model, seed)
    model.save_pretrained(folder)
    # One preprocessor_config.json holds both, as in the published folder.
    audio = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, return_attention_mask=True).to_dict()
    image = Qwen2VLImageProcessorPil(size={"shortest_edge": 64 * 64, "longest_edge": 128 * 128}, patch_size=16)
    merged = {**image.to_dict(), **audio}
    merged.pop("mel_filters", None)
    (folder / "preprocessor_config.json").write_text(json.dumps(merged, indent=1, default=str))
    return folder


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fast", action="store_true", help="one layer, 4 codebooks, 2 decoder blocks")
    args = ap.parse_args(argv)
    folder = build_tiny_model(args.path, args.seed, args.fast)
    print(f"tiny Qwen3-Omni written to {folder}")


if __name__ == "__main__":
    main()
