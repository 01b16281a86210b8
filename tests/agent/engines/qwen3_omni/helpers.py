"""Reference runs with `model.generate` and streamed runs, for the equivalence tests."""

from __future__ import annotations

import numpy as np
import torch

from agent.engines.qwen3_omni.prompt import Prompter
from agent.engines.qwen3_omni.stream import Conversation, OmniStreamer, Reply, TurnInput


def prompter(loaded) -> Prompter:
    return Prompter(loaded.tokenizer, loaded.feature_extractor, loaded.image_processor)


def noise(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.1 * rng.standard_normal(t.size) + 0.3 * np.sin(2 * np.pi * (200 + 100 * seed) * t)).astype(np.float32)


def image(seed: int, shape=(96, 128, 3)) -> np.ndarray:
    return (np.random.default_rng(seed).random(shape) * 255).astype(np.uint8)


def reference(model, turn: TurnInput, eos: int, max_tokens: int, max_frames: int, talker: bool = True):
    """`generate` with greedy decoding; returns text tokens, the codes it decoded ([frames, 16]) and the waveform."""
    ids = torch.tensor([turn.ids])
    kw = {"attention_mask": torch.ones_like(ids)}
    if turn.input_features is not None:
        kw.update(input_features=turn.input_features, feature_attention_mask=turn.feature_attention_mask)
    if turn.pixel_values is not None:
        kw.update(pixel_values=turn.pixel_values, image_grid_thw=turn.image_grid_thw)
    captured = []
    decode = model.code2wav.chunked_decode

    def spy(codes, **k):
        captured.append(codes.clone())
        return decode(codes, **k)

    model.code2wav.chunked_decode = spy
    try:
        out = model.generate(
            ids,
            thinker_max_new_tokens=max_tokens,
            thinker_eos_token_id=eos,
            thinker_do_sample=False,
            talker_do_sample=False,
            talker_max_new_tokens=max_frames,
            return_audio=talker,
            **kw,
        )
    finally:
        model.code2wav.chunked_decode = decode
    if not talker:
        seq = out if isinstance(out, torch.Tensor) else out.sequences
        return seq[0, ids.shape[1] :].tolist(), None, None
    seq, wav = out
    return seq[0, ids.shape[1] :].tolist(), captured[0][0].T, wav.reshape(-1).numpy()


def run_alone(streamer: OmniStreamer, turn: TurnInput, max_tokens: int, max_frames: int, conv=None, speak=True):
    """Drive one reply through the stages in the order the scheduler does; returns the reply and its frames."""
    reply = Reply(conv or Conversation(), speak=speak, max_text_tokens=max_tokens, max_frames=max_frames)
    streamer.prefill(reply, turn)
    if speak:
        streamer.talker_prefill(reply)
    pcm = []
    while not reply.done:
        progressed = False
        if not reply.text_done and (not speak or reply.speech_done or len(reply.tokens) < reply.talker_step + 4):
            streamer.thinker_step([reply])
            progressed = True
        if speak and not reply.speech_done and len(reply.frames) < len(reply.code0) and streamer.trailing_ready(reply):
            streamer.talker_step([reply])
            progressed = True
        if reply.decoded < len(reply.frames):
            pcm += streamer.decode_frames([reply])
            progressed = True
        assert progressed, "stuck"
    return reply, pcm
