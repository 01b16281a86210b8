"""The outbound speech encoder: one Opus packet a 20 ms frame, on the framer's pts, that any peer decodes."""

import numpy as np
import pytest
from aiortc.codecs import get_decoder
from aiortc.jitterbuffer import JitterFrame
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

from media.framer import OutputFramer
from media.opus import OpusDecoder, OpusError, SpeechEncoder
from media.pcm import StreamResampler

OPUS = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48000, channels=2, payloadType=111)


def test_speech_comes_out_one_packet_a_frame_and_decodes_as_a_browser_decodes_it():
    framer = OutputFramer()
    t = np.arange(framer.rate) / framer.rate  # one second at 24 kHz
    voice = (0.4 * np.sin(2 * np.pi * (200 + 400 * t) * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)
    encoder = SpeechEncoder(framer.rate)
    decoder = get_decoder(OPUS)  # aiortc's: 48 kHz stereo, as the SDP (opus/48000/2) says
    packets, decoded = [], []
    for i in range(50):
        if i % 4 == 0:
            framer.push(voice[i * 480 : i * 480 + 1920])  # 80 ms at a time, as an engine feeds it
        frame = framer.pull()
        packet = encoder.encode(frame.samples, frame.pts)
        packets.append(packet)
        (out,) = decoder.decode(JitterFrame(bytes(packet), 0))
        assert out.sample_rate == 48_000 and out.samples == 960
        decoded.append(out.to_ndarray().reshape(-1, 2)[:, 0])
    bits = 8 * sum(len(p) for p in packets)
    assert 30_000 < bits < 70_000  # ~48 kbit/s, not aiortc's 96 kbit/s stereo
    got = np.concatenate(decoded).astype(np.float32) / 32768
    rs = StreamResampler(24_000, 48_000)
    sent = np.concatenate([rs.process(voice), rs.process(np.zeros(0, np.float32), last=True)])
    # the codec's look-ahead delays the output by a few ms: the best alignment within 20 ms
    best = max(
        float(np.corrcoef(sent[2400 : 2400 + 36_000], got[2400 + d : 2400 + d + 36_000])[0, 1]) for d in range(960)
    )
    assert best > 0.95


def test_digital_silence_is_encoded_until_settled_then_resent_and_speech_after_it_decodes():
    rate = 24_000
    encoder = SpeechEncoder(rate)
    decoder = get_decoder(OPUS)
    t = np.arange(rate // 2) / rate
    voice = (12_000 * np.sin(2 * np.pi * 330 * t) * np.hanning(t.size)).astype(np.int16)
    frames = [voice[i : i + 480] for i in range(0, voice.size, 480)]  # 25 frames of speech
    silence = [np.zeros(480, np.int16)] * 30
    stream = frames + silence + frames
    packets = [encoder.encode(f, 480 * i) for i, f in enumerate(stream)]
    # speech twice, and silence only until the encoder's look-ahead has flushed the speech before it
    assert encoder.encoded == 2 * len(frames) + SpeechEncoder.SETTLE
    resent = set(packets[len(frames) + SpeechEncoder.SETTLE : len(frames) + len(silence)])
    assert len(resent) == 1 and len(next(iter(resent))) <= 4
    out = [decoder.decode(JitterFrame(p, 0))[0].to_ndarray().reshape(-1, 2)[:, 0] for p in packets]
    got = np.concatenate(out).astype(np.float32)
    silent_part = got[2 * 480 * (len(frames) + SpeechEncoder.SETTLE) : 2 * 480 * (len(frames) + len(silence))]
    assert np.abs(silent_part).max() == 0
    # the speech after the resent silence decodes as well as the first: the decoder followed
    first = got[: 2 * voice.size]
    again = got[2 * 480 * (len(frames) + len(silence)) :]
    assert np.abs(again).max() > 0.8 * 12_000
    assert float(np.corrcoef(first, again)[0, 1]) > 0.99


def voice_packets(seconds: float = 1.0, fec_loss_pct: int = 10) -> tuple[np.ndarray, list[bytes]]:
    """A voiced sweep at 48 kHz, encoded as a browser that sees loss encodes it (32 kbit/s, in-band FEC)."""
    from agent.replay import encode_opus

    t = np.arange(int(48_000 * seconds)) / 48_000
    pcm = (0.3 * np.sin(2 * np.pi * (150 + 100 * t) * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)
    return pcm, encode_opus(pcm, fec_loss_pct=fec_loss_pct)


def test_a_lost_packet_is_rebuilt_from_the_next_ones_fec_copy_closer_than_concealment_makes_it_up():
    _, packets = voice_packets()
    assert sum(OpusDecoder.carries_fec(p) for p in packets) > len(packets) // 2
    whole = OpusDecoder()
    reference = [whole.decode(p) for p in packets]
    errors: dict[str, list[float]] = {"fec": [], "concealed": []}
    for lost in range(10, len(packets) - 1, 7):
        if not OpusDecoder.carries_fec(packets[lost + 1]):
            continue
        for how in errors:
            dec = OpusDecoder()
            for p in packets[:lost]:
                dec.decode(p)
            made = dec.recover(packets[lost + 1], 960) if how == "fec" else dec.conceal(960)
            assert made.shape == (960,) and np.abs(made).max() > 0.01  # not silence
            err = np.sum((made - reference[lost]) ** 2) / np.sum(reference[lost] ** 2)
            errors[how].append(float(err))
    assert len(errors["fec"]) >= 4
    assert np.median(errors["fec"]) < 0.5 * np.median(errors["concealed"]), errors


def test_a_packet_libopus_cannot_read_is_an_error_not_a_crash():
    dec = OpusDecoder()
    with pytest.raises(OpusError):
        dec.decode(b"")
    with pytest.raises(OpusError):
        dec.decode(b"\xff" * 3)
    _, packets = voice_packets(0.2)
    assert dec.decode(packets[0]).shape == (960,)  # and it decodes on
