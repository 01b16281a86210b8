"""The offline components on real data: speech from espeak-ng, a real face photo."""

import numpy as np
import pytest
import skimage.data

from agent.engines.cascade.models import load_models
from benchmarks.harness import espeak_rendering, pink_noise, spoken, wer, with_noise


@pytest.fixture(scope="module")
def models():
    return load_models()


@pytest.mark.parametrize("name", ["moonshine", "whisper"])
def test_recognisers_on_espeak(name, tmp_path):
    recognizer = load_models(recognizer=name).recognizer
    for text in ("What time is it?", "Repeat after me: the sky is blue.", "How many people do you see?"):
        heard = recognizer.transcribe(spoken(text, tmp_path, rate=16_000))
        assert wer(text, heard) <= 0.25, heard
    assert recognizer.transcribe(np.zeros(16_000, np.float32)) == ""
    noise = np.random.default_rng(1).standard_normal(16_000).astype(np.float32) * 0.003
    assert recognizer.transcribe(noise) == ""


def test_moonshine_hears_commands_in_road_noise_and_nothing_in_noise_alone(models, tmp_path):
    """Speech in 10 dB pink noise once came back '' (the end token won the first step at p=0.4-0.66)."""
    pad = np.zeros(4000, np.float32)
    for seed, text in ((4, "Lock all the doors."), (7, "Turn the volume down a little.")):  # as benchmarked
        speech = np.concatenate([pad, espeak_rendering(text, "en-us+f3", speed=185), pad])
        heard = models.recognizer.transcribe(with_noise(speech, 10.0, seed))
        print(f"{text!r} in road noise: {heard!r}")
        assert heard and wer(text, heard) <= 0.5
    for seed in range(3):
        assert models.recognizer.transcribe((0.05 * pink_noise(32_000, seed)).astype(np.float32)) == ""


def test_moonshine_is_the_default_and_is_prepared_once(models, tmp_path, monkeypatch):
    from agent.engines.cascade import moonshine
    from agent.engines.cascade.models import moonshine_recognizer

    assert isinstance(models.recognizer, moonshine.MoonshineRecognizer)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    lines: list[str] = []
    folder = moonshine.prepare(tmp_path / "m", lines.append)
    assert sorted(f.name for f in folder.iterdir()) == [
        "decoder_model_merged.onnx",
        "encoder_model.onnx",
        "tokenizer.bin",
    ]
    assert len(lines) == 1 and "one-time conversion" in lines[0]
    assert moonshine.prepare(tmp_path / "m", lines.append) == folder and len(lines) == 1  # converted once
    heard = moonshine_recognizer(progress=False).transcribe(spoken("Open the front window.", tmp_path, rate=16_000))
    assert wer("open the front window", heard) == 0, heard


def test_synthesiser_streams_sentences_at_24k(models):
    parts = list(models.synthesizer.stream("Hello there. This is the second sentence."))
    assert len(parts) == 2
    assert all(p.dtype == np.float32 and 0.3 * 24_000 < p.size < 4 * 24_000 for p in parts)
    assert max(np.abs(p).max() for p in parts) > 0.05


def test_face_counter_on_real_photos(models):
    face = skimage.data.astronaut()
    assert models.faces.count(face) == 1
    assert models.faces.count(np.concatenate([face, face[:, ::-1]], axis=1)) == 2
    assert models.faces.count(skimage.data.coffee()) == 0


def test_speech_starts_at_once(models):
    first = next(models.synthesizer.stream("It's 9:53 AM."))
    onset = np.flatnonzero(np.abs(first) > 0.01)[0]
    assert onset <= 24_000 * 0.02  # no padding before the voice: it would be pure latency


class CountedCalls:
    """An onnxruntime session wrapped to count its `run` calls."""

    def __init__(self, session):
        self.session, self.calls = session, 0

    def run(self, *args, **kwargs):
        self.calls += 1
        return self.session.run(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.session, name)


def test_moonshine_checks_a_draft_in_one_call_and_hears_exactly_the_same(models, tmp_path, monkeypatch):
    """A pass over the turn so far gives the next one its tokens as a draft: the text is the same greedy decoding,
    with or without a draft, right or wrong, and a right one saves a decoder call per token."""
    recognizer = models.recognizer
    counted = CountedCalls(recognizer._decoder)
    monkeypatch.setattr(recognizer, "_decoder", counted)
    audio = spoken("Please open the rear windows and turn the fan down a little, it is warm in here.", tmp_path,
                   rate=16_000)  # fmt: skip
    plain = recognizer.hear(audio)
    plain_calls, counted.calls = counted.calls, 0
    assert len(plain.tokens) >= 10 and plain_calls == len(plain.tokens) + 1  # one call a token, and the end
    so_far = recognizer.hear(audio[: audio.size * 2 // 3])  # a pass while the user was still speaking
    counted.calls = 0
    drafted = recognizer.hear(audio, so_far.tokens)
    print(f"{plain.text!r}: {plain_calls} decoder calls alone, {counted.calls} with the draft of {so_far.text!r}")
    assert drafted == plain
    assert counted.calls <= plain_calls // 2
    rng = np.random.default_rng(5)
    for draft in ((), plain.tokens, plain.tokens[::-1], tuple(rng.integers(3, 32000, 40)), plain.tokens * 2):
        assert recognizer.hear(audio, draft) == plain  # never different, whatever the draft


def test_moonshine_weighs_other_texts_from_the_audio_it_heard(models, tmp_path):
    """`weigh` scores texts from the decoder state the pass kept: the same log-likelihood as a decoding forced
    through the text from the start; words said clearly leave every backchannel and stop saying far behind,
    and a saying heard is none behind. Its sureness (interruptions.unsure_below) is that log-likelihood a token."""
    from agent.engines.cascade import moonshine
    from media.turn_taking import InterruptionConfig, TurnTaking

    recognizer = models.recognizer
    sayings = TurnTaking(hears_words=True).sayings
    for text in (*sayings, "Open the rear window, please."):
        assert recognizer._decode(list(recognizer.spell(text))) == text

    def forced(audio: np.ndarray, text: str) -> float:
        """log p(text, end | audio): the decoder run once over the start token and the text, no cache."""
        speech = moonshine._trim_silence(audio)
        pad = np.zeros(int(moonshine._PAD_SECONDS * 16_000), np.float32)
        (hidden,) = recognizer._encoder.run(None, {recognizer._encoder_input: np.concatenate([pad, speech, pad])[None]})
        tokens = list(recognizer.spell(text))
        empty = np.zeros((1, recognizer._heads, 0, recognizer._head_dim), np.float32)
        feeds = {"input_ids": np.array([[1, *tokens]]), "encoder_hidden_states": hidden,
                 "use_cache_branch": np.array([False]), **dict.fromkeys(recognizer._past_names, empty)}  # fmt: skip
        (logits,) = recognizer._decoder.run(["logits"], feeds)
        log_probs = moonshine._log_softmax(logits[0, :, : recognizer._vocabulary])
        return float(log_probs[np.arange(len(tokens) + 1), [*tokens, 2]].sum())

    question = spoken("What time is it?", tmp_path, rate=16_000)
    heard = recognizer.hear(question, weighable=True)
    assert recognizer.weigh(recognizer.hear(question), sayings) is None  # a pass that kept nothing to weigh with
    gaps = recognizer.weigh(heard, [heard.text, *sayings])
    print(f"{heard.text!r}: sayings {min(gaps[1:]):.1f} or more less likely")
    assert abs(gaps[0]) < 1e-3 and min(gaps[1:]) > 5
    for i, text in enumerate(("Stop.", "Mm-hmm."), 1):  # the cached state scores as a fresh forced pass does
        assert abs((forced(question, heard.text) - forced(question, text)) - gaps[sayings.index(text) + 1]) < 1e-3, i
    yeah = recognizer.hear(espeak_rendering("Yeah.", "en-us"), weighable=True)
    assert yeah.text == "Yeah." and abs(recognizer.weigh(yeah, sayings)[sayings.index("Yeah.")]) < 1e-3
    # a saying whose first token alone falls further behind than `within` is left at that bound, never above
    # its own gap: the verdict (a saying within, and which kind is nearest) is the same
    for within in (2.5, 0.5):
        exact, bounded = recognizer.weigh(heard, sayings), recognizer.weigh(heard, sayings, within)
        for e, b in zip(exact, bounded, strict=True):
            assert (e <= within and abs(e - b) < 1e-3) or within < b <= e + 1e-3
    assert recognizer.weigh(recognizer.hear(np.zeros(16_000, np.float32), weighable=True), sayings) is None
    # how sure the pass was: its log-likelihood per token, the end's included; words said clearly are read
    sure = heard.sureness
    assert sure is not None and abs(sure - forced(question, heard.text) / (len(heard.tokens) + 1)) < 1e-3
    assert sure > InterruptionConfig().unsure_below
    assert recognizer.hear(question).sureness is None and recognizer.hear(np.zeros(16_000, np.float32)).sureness is None


def test_moonshine_reads_its_audio_again_leaning_toward_an_assistants_words(models):
    """`rehear`: "Temperature up." said by a voice the recogniser hears badly, read greedily as other words; read
    again from the encoding the pass kept, leaning toward the car's vocabulary, it is the request. With no
    leaning it is the first reading, token for token; its log-likelihood is the model's own (unbiased)."""
    from agent.engines.cascade.second_reading import SecondReading
    from agent.profiles.in_car import InCarAssistant
    from agent.profiles.understanding import vocabulary

    recognizer = models.recognizer
    pad = np.zeros(3200, np.float32), np.zeros(4800, np.float32)
    audio = np.concatenate([pad[0], espeak_rendering("temperature up", "en-029", speed=160), pad[1]])
    heard = recognizer.hear(audio, weighable=True)
    bias = recognizer.phrase_bias(vocabulary("car"), 2.0)
    again = recognizer.rehear(heard, bias)
    print(f"first {heard.text!r} ({heard.log_prob:.2f}), again {again.text!r} ({again.log_prob:.2f})")
    assert "temperature" not in heard.text.lower() and again.text == "Temperature up."
    assert recognizer.rehear(recognizer.hear(audio), bias) is None  # a pass that kept no encoding
    assert recognizer.rehear(heard, recognizer.phrase_bias(vocabulary("car"), 0.0)).tokens == heard.tokens
    car = InCarAssistant()
    assert not car.acts_on(heard.text) and car.acts_on(again.text)
    taken, yes = SecondReading(bias, within=1.0).read(recognizer, heard, car.acts_on)
    assert yes and taken.text == again.text
    kept, no = SecondReading(bias, within=1.0).read(recognizer, heard, lambda text: True)  # the first is acted on
    assert not no and kept is heard
    below = heard.log_prob - again.log_prob - 0.5  # a bound below the gap keeps the first reading
    assert SecondReading(bias, within=below).read(recognizer, heard, car.acts_on) == (heard, False)


def test_whisper_gives_a_second_opinion_where_neither_of_moonshines_readings_is_acted_on(models):
    """`SecondOpinion.read`: "Open all the windows." said by a voice Moonshine hears badly is "Open all that we
    know." whichever way it leans; Whisper tiny.en hears the request, which the car acts on and Moonshine finds
    about as likely as its own reading, of which it was unsure. A reading acted on, or one Moonshine was surer of
    than the config's `opinion_below`, is never heard again, and a bound below the gap keeps Moonshine's."""
    from agent.engines.cascade.models import second_opinion_recognizer
    from agent.engines.cascade.second_opinion import SecondOpinion
    from agent.engines.cascade.second_reading import SecondReading
    from agent.profiles.in_car import InCarAssistant
    from agent.profiles.understanding import vocabulary

    recognizer, whisper = models.recognizer, second_opinion_recognizer()
    assert second_opinion_recognizer() is whisper and whisper.beam == 5  # loaded once
    pad = np.zeros(3200, np.float32), np.zeros(4800, np.float32)
    audio = np.concatenate([pad[0], espeak_rendering("open all the windows", "en-gb-x-gbcwmd", speed=165), pad[1]])
    car = InCarAssistant()
    heard = recognizer.hear(audio, weighable=True)
    again, read_again = SecondReading(recognizer.phrase_bias(vocabulary("car"), 2.0), 1.0).read(
        recognizer, heard, car.acts_on
    )
    print(f"Moonshine {heard.text!r} ({heard.sureness:.2f} a token), leaning {again.text!r}")
    assert not read_again and not car.acts_on(heard.text) and heard.sureness <= -0.1
    taken, yes = SecondOpinion(whisper, 20.0, -0.1).read(recognizer, heard, audio, car.acts_on)
    assert yes and taken.text == "Open all the windows." and car.acts_on(taken.text)
    (gap,) = recognizer.weigh(heard, [taken.text])
    assert SecondOpinion(whisper, gap - 0.5, -0.1).read(recognizer, heard, audio, car.acts_on) == (heard, False)

    class Deaf:  # a second opinion that must not be asked
        def hear(self, audio):
            raise AssertionError("a reading the car acts on was heard again")

    clear = np.concatenate([pad[0], espeak_rendering("open all the windows", "en-us", speed=165), pad[1]])
    said = recognizer.hear(clear, weighable=True)
    assert car.acts_on(said.text)
    assert SecondOpinion(Deaf(), 20.0, 0.0).read(recognizer, said, clear, car.acts_on) == (said, False)
    surer = SecondOpinion(Deaf(), 20.0, heard.sureness - 0.01)  # Moonshine was surer of it than that
    assert surer.read(recognizer, heard, audio, car.acts_on) == (heard, False)


def test_a_pleasantry_whisper_writes_over_what_it_could_not_make_out_is_never_taken(models):
    """Whisper learnt from subtitles: in a measured voice-to-voice run it heard "Set the fan to the highest
    setting." in noise as "Thank you very much.", the car took it and said you're welcome. Whisper does not write
    it on demand, so a stand-in gives those words for Moonshine's unsure reading of a real request: the car would
    answer them, and without `second_opinion.pleasantry` they were taken, however far Moonshine found them."""
    from agent.engines.cascade.moonshine import Heard
    from agent.engines.cascade.second_opinion import SecondOpinion, pleasantry
    from agent.profiles.in_car import InCarAssistant

    class Writes:  # in Whisper's place: what it wrote
        def __init__(self, text: str) -> None:
            self.text = text

        def hear(self, audio):
            return Heard(self.text)

    recognizer, car = models.recognizer, InCarAssistant()
    pad = np.zeros(3200, np.float32), np.zeros(4800, np.float32)
    audio = np.concatenate([pad[0], espeak_rendering("open all the windows", "en-gb-x-gbcwmd", speed=165), pad[1]])
    heard = recognizer.hear(audio, weighable=True)
    assert not car.acts_on(heard.text) and car.acts_on("Thank you very much.")
    unbounded = 1e9
    for words in ("Thank you very much.", "Thanks for watching!", "Bye."):
        assert pleasantry(words)
        opinion = SecondOpinion(Writes(words), unbounded, 0.0)
        assert opinion.read(recognizer, heard, audio, car.acts_on) == (heard, False), words
    request = SecondOpinion(Writes("Open all the windows."), unbounded, 0.0)
    taken, yes = request.read(recognizer, heard, audio, car.acts_on)
    assert yes and taken.text == "Open all the windows."
    assert not pleasantry("Thanks, now open the windows.") and not pleasantry("")
