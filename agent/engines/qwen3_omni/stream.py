"""Qwen3-Omni streamed frame by frame: the model math, batched over sessions.

`model.generate(return_audio=True)` runs the Thinker to its end, then the
Talker to its end, then decodes the codec in 300-frame chunks. Here each stage
advances one step at a time so that speech exists from the first codec frame:

- Thinker: prefill the turn onto the conversation's cache, then one token per
  step; it only has to stay one token ahead of the Talker.
- Talker: prefilled from the Thinker's embeddings and its hidden state at
  `accept_hidden_layer`; each step the MTP (code predictor) fills codebooks
  1-15 of the previous frame, and the sum of that frame's code embeddings plus
  the next text token's projection is the next input.
- Code2Wav: its transformer runs one frame at a time on a sliding-window
  cache, and its conv stack streams (`code2wav.py`): every layer keeps its
  left context, so each frame yields 1920 new final samples (1365 the first).

Greedy decoding reproduces `generate(..., do_sample=False)` token for token
and code for code (tests/agent/engines/qwen3_omni/test_stream.py). Every
function takes a list of `Reply` objects, one per session, and runs them as
one batch. The keys and values of the Thinker, the Talker and Code2Wav's
transformer live in preallocated slot pools (`slots.py`), one row per
sequence, written in place: a batched decode step reads the rows as they lie,
each masked to its own length (and, for Code2Wav, its sliding window).

With `graphs` (the default on CUDA) the decode steps run as CUDA graphs
(`graphs.py`): the Thinker step, the Talker step with its MTP, Code2Wav's
transformer step and its conv stack's steady frames (a stream's first frame
has other shapes and runs as it is). Tokens and codes are the same either way
(tests/agent/engines/qwen3_omni/test_graphs.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensLogitsProcessor,
)

from agent.engines.qwen3_omni.code2wav import State, StreamingConvStack, split_state, stack_states
from agent.engines.qwen3_omni.graphs import (
    BUCKETS,
    ConvContexts,
    Outputs,
    StaticStep,
    StepGraphs,
    bucket,
    read_bucket,
)
from agent.engines.qwen3_omni.mtp import ResidualPredictor
from agent.engines.qwen3_omni.slots import BatchStep, SlotCache, SlotPool


def first_frame_samples(code2wav_config: Any) -> int:
    """Samples of a stream's first frame: each decoder block's transposed conv holds back one input, r samples
    at its rate (1365 for the published config: 1920 less 8*60 + 5*12 + 4*3 + 3)."""
    rates = list(code2wav_config.upsample_rates)
    frame = int(np.prod(rates + list(code2wav_config.upsampling_ratios)))
    return frame - sum(r * int(np.prod(rates[i + 1 :])) for i, r in enumerate(rates))


@dataclass
class TurnInput:
    """One user turn as the Thinker reads it: prompt ids with placeholders, and the media for them."""

    ids: list[int]
    input_features: torch.Tensor | None = None  # [n_audio, 128, frames]
    feature_attention_mask: torch.Tensor | None = None  # [n_audio, frames]
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.Tensor | None = None  # [n_images, 3]


@dataclass
class Conversation:
    """What a session keeps between turns: the Thinker's cache and the Talker's view of the user."""

    cache: SlotCache | None = None  # the Thinker's keys and values: a row of the streamer's pool
    next_pos: int = 0  # next rope position (3D positions run ahead of the token count with images)
    role: int | None = None  # role token of the segment the cache ends in
    user_ids: list[torch.Tensor] = field(default_factory=list)  # per turn: the user segment's ids
    user_embeds: list[torch.Tensor] = field(default_factory=list)  # per turn: their Talker inputs
    image_grids: list[torch.Tensor] = field(default_factory=list)  # per turn: grids of images in user segments
    audio_lengths: list[torch.Tensor] = field(default_factory=list)  # per turn: feature lengths of its audio
    # per turn: its input and the reply's tokens (a live list; all but the last were read back into the cache)
    turns: list[tuple[TurnInput, list[int]]] = field(default_factory=list)

    @property
    def length(self) -> int:
        """Tokens the Thinker has read (its cache's length)."""
        return self.cache.get_seq_length() if self.cache is not None else 0


@dataclass
class Reply:
    """One turn's generation state; the scheduler advances it stage by stage."""

    conv: Conversation
    speak: bool
    max_text_tokens: int
    max_frames: int
    tokens: list[int] = field(default_factory=list)  # the Thinker's output, EOS included when it came
    prompt_tail: list[int] = field(default_factory=list)  # "<|im_start|>assistant\n" as the prompt ended
    text_done: bool = False
    # Talker
    talker_cache: SlotCache | None = None
    talker_pos: int = 0
    talker_step: int = 0  # generation_step: how many trailing text entries consumed
    code0: list[int] = field(default_factory=list)  # codebook 0 per frame, EOS when it came
    last_hidden: torch.Tensor | None = None  # the Talker's last hidden state at its last position
    speech_done: bool = False
    # Code2Wav
    frames: list[torch.Tensor] = field(default_factory=list)  # [16] codes per finished frame
    c2w_cache: SlotCache | None = None  # Code2Wav's transformer: a row of the streamer's pool
    c2w_state: State = field(default_factory=dict)  # the streaming conv stack's left contexts
    decoded: int = 0  # frames turned into samples
    cancelled: bool = False

    @property
    def done(self) -> bool:
        return self.cancelled or (
            self.text_done and (not self.speak or (self.speech_done and self.decoded == len(self.frames)))
        )


class OmniStreamer:
    """The stages of one loaded model; stateless apart from the model, so any number of sessions share it."""

    def __init__(
        self,
        model: Any,
        speaker: str = "ethan",
        repetition_penalty: float = 1.05,
        thinker_processors: LogitsProcessorList | None = None,
        max_context: int = 8192,
        max_frames: int = 375,
        slots: int = 8,
        graphs: bool | None = None,
    ) -> None:
        """`max_context` and `max_frames` bound a conversation's Thinker tokens and a reply's speech frames (they
        size each slot); `slots` is where the pools start (they double when more sequences are live). `graphs`:
        the decode steps as CUDA graphs (None: on CUDA only); on the CPU they run uncaptured, for the tests."""
        self.model = model
        # Applied to the Thinker's logits before the greedy pick (e.g. banned tokens); empty: plain greedy.
        self.thinker_processors = thinker_processors or LogitsProcessorList()
        self.thinker = model.thinker
        self.config = model.config
        self.has_talker = getattr(model, "has_talker", False)
        tc = self.config.talker_config
        self.device = self.thinker.device
        if graphs is None:
            graphs = self.device.type == "cuda"
        self.graphs: StepGraphs | None = None
        if graphs:
            self.graphs = StepGraphs(self.device, capture=self.device.type == "cuda")
            slots = 1 << (slots - 1).bit_length()  # a power of two: every bucket up to it fits in the pool
            if getattr(model, "_can_set_experts_implementation", lambda: False)():
                # MoE layers with no host sync: grouped_mm, whose CUDA kernel is bf16 only; elsewhere batched_mm
                dtype = next(model.parameters()).dtype
                cuda_other = self.device.type == "cuda" and dtype != torch.bfloat16
                model.set_experts_implementation("batched_mm" if cuda_other else "grouped_mm")
        self.thinker_pool = self._pool(self.thinker, self.thinker.config.text_config, max_context, slots)
        self.eos = self.config.im_end_token_id
        self.accept_layer = tc.accept_hidden_layer
        self.mm_ids = torch.tensor(
            [
                self.config.thinker_config.audio_token_id,
                self.config.thinker_config.image_token_id,
                self.config.thinker_config.video_token_id,
            ],
            device=self.device,
        )
        if self.has_talker:
            self.talker = model.talker
            if not hasattr(self.talker.config, "audio_config"):
                # The Talker's rope index reads the audio encoder's window when a turn has both audio and images,
                # but its config lacks it (upstream generate() fails there too); it is the Thinker's.
                self.talker.config.audio_config = self.config.thinker_config.audio_config
            self.code2wav = model.code2wav
            self.speaker_id = tc.speaker_id[speaker.lower()]
            vocab = tc.text_config.vocab_size
            self.codec_eos = tc.codec_eos_token_id
            suppressed = [i for i in range(vocab - 1024, vocab) if i != self.codec_eos]
            self.talker_processors = LogitsProcessorList(
                [SuppressTokensLogitsProcessor(suppressed, device=self.device)]
            )
            if repetition_penalty != 1.0:
                self.talker_processors.insert(0, RepetitionPenaltyLogitsProcessor(repetition_penalty))
            special = torch.tensor(
                [[self.config.tts_bos_token_id, self.config.tts_eos_token_id, self.config.tts_pad_token_id]],
                device=self.device,
            )
            with torch.no_grad():
                proj = self.talker.text_projection(self.thinker.get_input_embeddings()(special))
            self.tts_bos, self.tts_eos, self.tts_pad = proj.chunk(3, dim=1)  # each [1, 1, d]
            self.upsample = int(self.code2wav.total_upsample)
            # the Talker reads every user segment of the conversation and its own prompt, then the reply's frames
            self.talker_pool = self._pool(
                self.talker, self.talker.config.text_config, max_context + max_frames + 16, slots
            )
            self.c2w_pool = self._pool(self.code2wav, self.code2wav.config, max_frames + 16, slots)
            self.conv_stack = StreamingConvStack(self.code2wav)
            self.contexts = ConvContexts()  # with graphs: every stream's conv contexts, in place
            self.mtp = ResidualPredictor(self.talker)

    def _pool(self, part: Any, cfg: Any, capacity: int, slots: int) -> SlotPool:
        """A slot pool for `part` (its weights' dtype) whose transformer is described by `cfg`."""
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype = next(part.parameters()).dtype
        return SlotPool(cfg.num_hidden_layers, cfg.num_key_value_heads, head_dim, capacity, slots, dtype, self.device)

    # ---------------------------------------------------------------- Thinker

    def _positions(self, turn: TurnInput, conv: Conversation) -> tuple[torch.Tensor, int]:
        """3D rope positions of the new tokens: the chunk's own index shifted past what the cache holds."""
        ids = torch.tensor([turn.ids], device=self.device)
        audio_lengths = turn.feature_attention_mask.sum(-1) if turn.feature_attention_mask is not None else None
        pos, _ = self.thinker.model.get_rope_index(
            ids, turn.image_grid_thw, None, torch.ones_like(ids), False, audio_lengths, None
        )
        pos = pos.to(torch.long) + conv.next_pos
        text = torch.arange(conv.length, conv.length + ids.shape[1], device=self.device).view(1, 1, -1)
        return torch.cat([text, pos], dim=0), int(pos.max()) + 1

    @torch.no_grad()
    def prefill(self, reply: Reply, turn: TurnInput) -> None:
        """Append a turn to the conversation's cache and take the reply's first token."""
        conv = reply.conv
        reply.prompt_tail = list(turn.ids[-3:])
        if conv.cache is None:
            conv.cache = self.thinker_pool.acquire()
        ids = torch.tensor([turn.ids], device=self.device)
        positions, next_pos = self._positions(turn, conv)
        out = self.thinker(
            input_ids=ids,
            input_features=turn.input_features,
            feature_attention_mask=turn.feature_attention_mask,
            pixel_values=turn.pixel_values,
            image_grid_thw=turn.image_grid_thw,
            attention_mask=conv.cache.prefill_mask(ids.shape[1], self.device),
            position_ids=positions,
            cache=conv.cache,
            use_cache=True,
            output_hidden_states=self.has_talker,
        )
        conv.cache.advance()
        conv.next_pos = next_pos
        if self.has_talker:
            self._keep_user_part(conv, turn, ids[0], out.hidden_states)
        self._take_tokens([reply], out.logits[:, -1])

    def _keep_user_part(self, conv: Conversation, turn: TurnInput, ids: torch.Tensor, hidden: tuple) -> None:
        """The Talker sees every user segment of the conversation: media as projected hidden states, text as
        projected embeddings (what `generate` gathers from the whole sequence)."""
        role = conv.role
        mask = torch.zeros(len(ids), dtype=torch.bool)
        im_start, values = self.config.im_start_token_id, ids.tolist()
        for i, tok in enumerate(values):
            if i > 0 and values[i - 1] == im_start:
                role = tok
            if tok == im_start and i + 1 < len(values):
                role = values[i + 1]
            mask[i] = role == self.config.user_token_id
        conv.role = role
        if not mask.any():
            return
        mask = mask.to(self.device)
        embeds, accept = hidden[0][0], hidden[self.accept_layer][0]
        mm = torch.isin(ids, self.mm_ids)
        part = torch.empty(
            len(ids), self.config.talker_config.text_config.hidden_size, device=self.device, dtype=self.talker.dtype
        )
        if mm.any():
            part[mm] = self.talker.hidden_projection(accept[mm]).to(part.dtype)
        if (~mm).any():
            part[~mm] = self.talker.text_projection(embeds[~mm]).to(part.dtype)
        conv.user_ids.append(ids[mask])
        conv.user_embeds.append(part[mask])
        if turn.image_grid_thw is not None:
            conv.image_grids.append(turn.image_grid_thw)
        if turn.feature_attention_mask is not None:
            conv.audio_lengths.append(turn.feature_attention_mask.sum(-1))

    def _processed(self, processors: LogitsProcessorList, histories: list[list[int]], logits: torch.Tensor):
        """Logits [n, vocab] after `processors`, each row with its own history (they differ in length)."""
        rows = []
        for history, row in zip(histories, logits, strict=True):
            ids = torch.tensor([history], dtype=torch.long, device=self.device)
            rows.append(processors(ids, row[None].float())[0])
        return torch.stack(rows)

    def _take_tokens(self, replies: list[Reply], logits: torch.Tensor) -> None:
        """Each reply's next text token from its row of logits [n, vocab]: one copy to the host for all."""
        if self.thinker_processors:
            logits = self._processed(self.thinker_processors, [r.tokens for r in replies], logits)
        for reply, token in zip(replies, torch.argmax(logits, dim=-1).tolist(), strict=True):
            reply.tokens.append(token)
            if token == self.eos or len(reply.tokens) >= reply.max_text_tokens:
                reply.text_done = True

    @torch.no_grad()
    def thinker_step(self, replies: list[Reply]) -> None:
        """One more token for each reply (the last token goes into its cache)."""
        convs = [r.conv for r in replies]
        ids = torch.tensor([[r.tokens[-1]] for r in replies], device=self.device)
        rope = torch.tensor([[c.next_pos] for c in convs], device=self.device)
        caches, zero = [c.cache for c in convs], self._zero_id
        step, out = self._step("thinker", self.thinker_pool, caches, ids=(ids, zero), rope=(rope, zero))
        step.advance()
        for conv in convs:
            conv.next_pos += 1
        self._take_tokens(replies, step.gather(out["logits"]))

    def _thinker_forward(self, step: BatchStep, ids: torch.Tensor, rope: torch.Tensor) -> Outputs:
        out = self.thinker(
            input_ids=ids,
            attention_mask=step.mask,
            position_ids=self._step_positions(step, rope),
            cache=step,
            use_cache=True,
        )
        return {"logits": out.logits[:, -1]}

    def _step(
        self, stage: str, pool: SlotPool, caches: list[SlotCache], **inputs: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[BatchStep, Outputs]:
        """One batched decode step of `stage` on `caches`' rows; each input is (one row per sequence, what idle
        rows get). With graphs it runs on a bucket of rows and a read length it shares with other steps."""
        forward = getattr(self, f"_{stage}_forward")
        rows = bucket(max(c.slot for c in caches) + 1) if self.graphs is not None else None
        if rows is None or rows > pool.slots:
            step = BatchStep(pool, caches, self.device)
            return step, forward(step, **{k: step.scatter(v, fill) for k, (v, fill) in inputs.items()})
        read = read_bucket(max(pool.lengths[:rows]) + 1, pool.capacity)

        def build() -> StaticStep:
            step = BatchStep(pool, caches, self.device, rows, read)
            buffers = {k: step.scatter(v, fill) for k, (v, fill) in inputs.items()}
            return StaticStep(lambda: forward(step, **buffers), buffers, step)

        static = self.graphs.get((stage, rows, read), pool.generation, build)
        static.step.load(caches)
        static.feed(**{k: static.step.scatter(v, fill) for k, (v, fill) in inputs.items()})
        return static.step, self.graphs.run((stage, rows, read), static)

    @property
    def _zero_id(self) -> torch.Tensor:
        return torch.zeros(1, 1, dtype=torch.long, device=self.device)

    @staticmethod
    def _step_positions(step: BatchStep, rope: torch.Tensor) -> torch.Tensor:
        """Position ids of one decode step: the text row (each row's cache length), then 3 equal rope rows."""
        return torch.cat([step.pos.view(1, -1, 1), rope.view(1, -1, 1).expand(3, -1, -1)])

    # ---------------------------------------------------------------- Talker

    def _text_embed(self, tokens: list[int]) -> torch.Tensor:
        ids = torch.tensor([tokens], device=self.device)
        return self.talker.text_projection(self.thinker.get_input_embeddings()(ids))

    def trailing_ready(self, reply: Reply) -> bool:
        """The Talker's next step reads text token `talker_step + 1`: it needs that token or the end of text."""
        return reply.text_done or len(reply.tokens) >= reply.talker_step + 2

    def _trailing(self, reply: Reply) -> torch.Tensor:
        t, n = reply.talker_step, len(reply.tokens)
        if reply.text_done and t + 1 >= n - 1:
            return self.tts_eos[0] if t + 1 == n - 1 else self.tts_pad[0]
        return self._text_embed([reply.tokens[t + 1]])[0]

    @torch.no_grad()
    def talker_prefill(self, reply: Reply) -> None:
        """Start the Talker on the conversation's user segments and the reply's first text token."""
        conv, cfg = reply.conv, self.config.talker_config
        user_embeds = torch.cat(conv.user_embeds)[None]
        user_ids = torch.cat(conv.user_ids)[None]
        assistant = self._text_embed(reply.prompt_tail + reply.tokens[:1])
        text_part = torch.cat([assistant[:, :3], self.tts_pad.expand(1, 4, -1), self.tts_bos, assistant[:, 3:4]], dim=1)
        codec = torch.tensor(
            [
                [
                    cfg.codec_nothink_id,
                    cfg.codec_think_bos_id,
                    cfg.codec_think_eos_id,
                    self.speaker_id,
                    cfg.codec_pad_id,
                    cfg.codec_bos_id,
                ]
            ],
            device=self.device,
        )
        codec_part = torch.cat(
            [
                torch.zeros(1, 3, text_part.shape[-1], device=self.device, dtype=text_part.dtype),
                self.talker.get_input_embeddings()(codec),
            ],
            dim=1,
        )
        embeds = torch.cat([user_embeds, text_part + codec_part], dim=1)
        ids = torch.cat(
            [user_ids, torch.full((1, text_part.shape[1]), self.config.tts_pad_token_id, device=self.device)], dim=1
        )
        mask = torch.ones_like(ids)
        grids = torch.cat(conv.image_grids) if conv.image_grids else None
        audio = torch.cat(conv.audio_lengths) if conv.audio_lengths else None
        if grids is not None or audio is not None:
            rope, _ = self.talker.get_rope_index(ids, grids, None, mask, False, audio, None)
            rope = rope.to(torch.long)
        else:
            rope = torch.arange(ids.shape[1], device=self.device).view(1, 1, -1).expand(3, 1, -1)
        text = torch.arange(ids.shape[1], device=self.device).view(1, 1, -1)
        reply.talker_cache = self.talker_pool.acquire()
        out = self.talker(
            inputs_embeds=embeds,
            attention_mask=reply.talker_cache.prefill_mask(embeds.shape[1], self.device),
            position_ids=torch.cat([text, rope]),
            cache=reply.talker_cache,
            use_cache=True,
            output_hidden_states=True,
        )
        reply.talker_cache.advance()
        reply.talker_pos = int(rope.max()) + 1
        reply.last_hidden = out.hidden_states[0][-1][:, -1:]
        self._take_codes([reply], out.logits[:, -1])

    def _take_codes(self, replies: list[Reply], logits: torch.Tensor) -> None:
        """Each reply's next codebook-0 code from its row of logits [n, vocab] (its own history penalised): one
        copy to the host for all."""
        scores = self._processed(self.talker_processors, [r.code0 for r in replies], logits)
        for reply, code in zip(replies, torch.argmax(scores, dim=-1).tolist(), strict=True):
            if code == self.codec_eos:
                reply.speech_done = True
                continue
            reply.code0.append(code)
            if len(reply.code0) >= reply.max_frames:
                reply.speech_done = True  # generate() stops here too: the last code0 never gets its residuals
                reply.code0.pop()

    @torch.no_grad()
    def predict_residuals(self, hidden: torch.Tensor, code0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The MTP: codebooks 1-15 for a batch of frames; returns [B, 16] codes and their summed embedding."""
        return self.mtp(hidden, code0)

    @torch.no_grad()
    def talker_step(self, replies: list[Reply]) -> None:
        """Finish each reply's pending frame (MTP) and predict the next frame's codebook 0."""
        hidden = torch.cat([r.last_hidden for r in replies])
        code0 = torch.tensor([r.code0[-1] for r in replies], device=self.device)
        trailing = torch.cat([self._trailing(r) for r in replies])
        rope = torch.tensor([[r.talker_pos] for r in replies], device=self.device)
        caches = [r.talker_cache for r in replies]
        if self.graphs is None:  # the MTP on the replies alone (and timed apart in the benchmark)
            codes, summed = self.predict_residuals(hidden, code0)
            embeds = (summed + trailing)[:, None]
            step, out = self._step(
                "talker", self.talker_pool, caches, embeds=(embeds, embeds[:1] * 0), rope=(rope, self._zero_id)
            )
        else:  # the MTP inside the Talker's graph, on every row of its bucket
            step, out = self._step(
                "talker_mtp", self.talker_pool, caches,
                hidden=(hidden, hidden[:1] * 0), code0=(code0, code0[:1] * 0), trailing=(trailing, trailing[:1] * 0),
                rope=(rope, self._zero_id),
            )  # fmt: skip
            codes = step.gather(out["codes"])
        for reply, frame in zip(replies, codes, strict=False):
            reply.frames.append(frame)
            reply.talker_step += 1
        step.advance()
        last = step.gather(out["hidden"])
        for i, reply in enumerate(replies):
            reply.talker_pos += 1
            reply.last_hidden = last[i : i + 1, None]
        self._take_codes(replies, step.gather(out["logits"]))

    def _talker_forward(self, step: BatchStep, embeds: torch.Tensor, rope: torch.Tensor) -> Outputs:
        out = self.talker(
            inputs_embeds=embeds,
            attention_mask=step.mask,
            position_ids=self._step_positions(step, rope),
            cache=step,
            use_cache=True,
            output_hidden_states=True,
            generation_step=0,  # unused; the forward adds one to it
        )
        return {"logits": out.logits[:, -1], "hidden": out.hidden_states[0][-1][:, -1]}

    def _talker_mtp_forward(
        self, step: BatchStep, hidden: torch.Tensor, code0: torch.Tensor, trailing: torch.Tensor, rope: torch.Tensor
    ) -> Outputs:
        codes, summed = self.mtp(hidden, code0)
        return {"codes": codes, **self._talker_forward(step, (summed + trailing)[:, None], rope)}

    # ---------------------------------------------------------------- Code2Wav

    @torch.no_grad()
    def decode_frames(self, replies: list[Reply]) -> list[np.ndarray]:
        """The next codec frame of each reply as its final samples (`first_frame_samples` for a stream's first,
        then 1920)."""
        for reply in replies:
            if reply.c2w_cache is None:
                reply.c2w_cache = self.c2w_pool.acquire()
        codes = torch.stack([r.frames[r.decoded] for r in replies])  # [n, groups]
        step, out = self._step("c2w", self.c2w_pool, [r.c2w_cache for r in replies], codes=(codes, codes[:1] * 0))
        step.advance()
        hidden = step.gather(out["hidden"])  # [n, 1, d]
        results: list[np.ndarray | None] = [None] * len(replies)
        # a stream's first frame has no context yet (other shapes): the two phases batch apart
        for first in (True, False):
            idx = [i for i, r in enumerate(replies) if (r.decoded == 0) == first]
            if not idx:
                continue
            if self.graphs is not None and not first:
                wav = self._steady_frames([replies[i] for i in idx], hidden[idx])
            else:
                state = stack_states([replies[i].c2w_state for i in idx])
                wav = self.conv_stack.step(hidden[idx], state)
                for i, row_state in zip(idx, split_state(state, len(idx)), strict=True):
                    if self.graphs is not None:  # from now on the stream's contexts live in place
                        self.contexts.fit(row_state, self.c2w_pool.slots)
                        self.contexts.put(replies[i].c2w_cache.slot, row_state)
                    else:
                        replies[i].c2w_state = row_state
            for i, row in zip(idx, wav.float().cpu().numpy(), strict=True):
                results[i] = row
        for reply in replies:
            reply.decoded += 1
        return results  # type: ignore[return-value]

    def _c2w_forward(self, step: BatchStep, codes: torch.Tensor) -> Outputs:
        c2w = self.code2wav
        embeds = c2w.code_embedding(codes[:, :, None] + c2w.code_offset).mean(1)  # [rows, 1, d]
        # each frame sees the last `sliding_window` frames of its own stream, itself included
        window = step.columns[None, :] > (step.pos[:, None] - c2w.config.sliding_window)
        full = step.mask
        out = c2w.pre_transformer(
            inputs_embeds=embeds,
            position_ids=step.pos[:, None],
            attention_mask={"sliding_attention": full & window[:, None, None, :], "full_attention": full},
            cache=step,
            use_cache=True,
        )
        return {"hidden": out.last_hidden_state}

    def _steady_frames(self, replies: list[Reply], hidden: torch.Tensor) -> torch.Tensor:
        """Frames after each stream's first through the conv stack, its contexts read and written in place."""
        self.contexts.fit(self.contexts.buffers, self.c2w_pool.slots)
        n = len(replies)
        rows = bucket(n) or n  # beyond the largest bucket: uncaptured, unpadded
        slots = [r.c2w_cache.slot for r in replies] + [self.contexts.spare] * (rows - n)
        inputs = {
            "slots": torch.tensor(slots, device=self.device),
            "hidden": torch.cat([hidden, hidden.new_zeros(rows - n, *hidden.shape[1:])]),
        }

        def build() -> StaticStep:
            buffers = {k: v.clone() for k, v in inputs.items()}
            return StaticStep(lambda: self._conv_forward(**buffers), buffers)

        key = ("conv", rows)
        static = self.graphs.get(key, (self.contexts.generation, self.c2w_pool.generation), build)
        static.feed(**inputs)
        return self.graphs.run(key, static, capture=rows in BUCKETS)["wav"][:n]

    def _conv_forward(self, slots: torch.Tensor, hidden: torch.Tensor) -> Outputs:
        state = {k: buf.index_select(0, slots) for k, buf in self.contexts.buffers.items()}
        wav = self.conv_stack.step(hidden, state)
        for k, buf in self.contexts.buffers.items():
            buf.index_copy_(0, slots, state[k])
        return {"wav": wav}
