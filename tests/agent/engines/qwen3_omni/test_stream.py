"""Streamed Thinker/Talker/Code2Wav against `model.generate` with greedy decoding (tiny random model, CPU)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from agent.engines.qwen3_omni.prompt import join
from agent.engines.qwen3_omni.stream import Conversation, OmniStreamer, first_frame_samples
from benchmarks.harness import noise
from tests.support import image, prompter, reference, run_alone

SYSTEM = "You are a helpful assistant."


def rel(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def compare(loaded, turn, max_tokens=24, max_frames=48):
    model = loaded.model
    eos = model.config.im_end_token_id
    streamer = OmniStreamer(model)
    ref_tokens, ref_codes, ref_wav = reference(model, turn, eos, max_tokens, max_frames)
    reply, pcm = run_alone(streamer, turn, max_tokens, max_frames)
    assert reply.tokens == ref_tokens
    codes = torch.stack(reply.frames)
    assert codes.shape == ref_codes.shape and codes.shape[1] == model.config.talker_config.num_code_groups
    assert torch.equal(codes, ref_codes), "a codebook differs"
    assert [len(p) for p in pcm] == [first_frame_samples(model.config.code2wav_config)] + [1920] * (len(pcm) - 1)
    wav = np.concatenate(pcm)
    return wav, ref_wav, len(pcm)


@pytest.fixture
def float64_code2wav(tiny, tiny_seed1, tiny_fast):
    """Code2Wav in float64 on both sides: float32 rounding through the tiny model's deep, unclipped conv stack
    reaches 1e-5 by itself, which would hide what this test is about (the algorithm)."""
    for loaded in (tiny, tiny_seed1, tiny_fast):
        loaded.model.code2wav.double()
    yield
    for loaded in (tiny, tiny_seed1, tiny_fast):
        loaded.model.code2wav.float()


def test_first_frame_of_the_published_layout():
    """Four decoder blocks (8, 5, 4, 3) hold back 555 samples of the first 1920; two (16, 30) hold back 510."""
    published = SimpleNamespace(upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2])
    assert first_frame_samples(published) == 1365
    assert first_frame_samples(SimpleNamespace(upsample_rates=[16, 30], upsampling_ratios=[4])) == 1920 - 510


@pytest.mark.parametrize("seconds,text", [(1.0, None), (2.7, "hello"), (6.3, "what is this?")])
@pytest.mark.parametrize("which", ["tiny", "tiny_seed1", "tiny_fast"])
def test_streamed_equals_generate(request, which, seconds, text, float64_code2wav):
    loaded = request.getfixturevalue(which)
    turn = prompter(loaded).turn(audio=noise(seconds, int(seconds * 10)), text=text, system=SYSTEM)
    wav, ref, frames = compare(loaded, turn)
    err = rel(wav, ref)
    print(f"{which} {seconds} s: {frames} frames, relative error {err:.2e}")
    assert frames >= 4
    assert err < 1e-5
    # every frame boundary too: each 80 ms slice matches on its own
    first = first_frame_samples(loaded.model.config.code2wav_config)
    edges = [0, first] + [first + 1920 * k for k in range(1, frames)]
    for a, b in zip(edges, edges[1:], strict=False):
        assert rel(wav[a:b], ref[a:b]) < 1e-5 or np.abs(ref[a:b]).max() < 1e-9


def test_streamed_equals_generate_in_float32(tiny):
    """The engine's own precision on the CPU: identical codes; the waveform within float32 rounding."""
    turn = prompter(tiny).turn(audio=noise(2.0, 3), text="hi", system=SYSTEM)
    wav, ref, _ = compare(tiny, turn)
    print(f"float32 relative error {rel(wav, ref):.2e}")
    assert rel(wav, ref) < 1e-3


def test_video_frames_and_audio(tiny, float64_code2wav):
    """Camera frames go in as images beside the audio; the reply depends on them and still matches generate."""
    p = prompter(tiny)
    with_images = p.turn(audio=noise(1.5, 4), images=[image(1), image(2)], system=SYSTEM)
    assert with_images.image_grid_thw.shape == (2, 3)
    wav, ref, _ = compare(tiny, with_images)
    assert rel(wav, ref) < 1e-5
    other = p.turn(audio=noise(1.5, 4), images=[image(7), image(8)], system=SYSTEM)
    streamer = OmniStreamer(tiny.model)
    a, _ = run_alone(streamer, with_images, 24, 48)
    b, _ = run_alone(streamer, other, 24, 48)
    # the pictures reach the model: the hidden states at the image positions (what the Talker hears) differ
    assert not torch.allclose(a.conv.user_embeds[0], b.conv.user_embeds[0])


def test_text_only_reply_is_the_same_text(tiny):
    turn = prompter(tiny).turn(audio=noise(2.0, 5), system=SYSTEM)
    ref_tokens, _, _ = reference(tiny.model, turn, tiny.model.config.im_end_token_id, 24, 48, talker=False)
    reply, pcm = run_alone(OmniStreamer(tiny.model), turn, 24, 48, speak=False)
    assert reply.tokens == ref_tokens and pcm == [] and reply.talker_cache is None


def test_second_turn_on_the_cache_equals_generate_on_the_whole_conversation(tiny, float64_code2wav):
    model, p = tiny.model, prompter(tiny)
    streamer = OmniStreamer(model)
    conv = Conversation()
    first = p.turn(audio=noise(1.2, 6), system=SYSTEM)
    reply1, _ = run_alone(streamer, first, 12, 20, conv=conv)
    second = p.turn(audio=noise(2.2, 7), text="and now?")
    close = p.text_ids("<|im_end|>\n")
    reply2, pcm = run_alone(streamer, join(close, [second]), 16, 40, conv=conv)
    # the same conversation as one input: turn 1, the reply as the cache holds it, turn 2
    whole = join([], [first, reply1.tokens[:-1] + close, second])
    ref_tokens, ref_codes, ref_wav = reference(model, whole, model.config.im_end_token_id, 16, 40)
    assert reply2.tokens == ref_tokens
    assert torch.equal(torch.stack(reply2.frames), ref_codes)
    assert rel(np.concatenate(pcm), ref_wav) < 1e-5
    assert conv.length == len(whole.ids) + len(reply2.tokens) - 1
    assert len(conv.user_embeds) == 2  # the Talker hears both user turns, as generate's does
