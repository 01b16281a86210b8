"""Slot pools for the Thinker's and Talker's keys and values, and the fixed-shape decode steps built on them."""

from __future__ import annotations

import gc

import pytest
import torch

from agent.engines.qwen3_omni.slots import BatchStep, CapacityError, SlotPool
from agent.engines.qwen3_omni.stream import Conversation, OmniStreamer, Reply
from benchmarks.harness import noise
from tests.support import prompter


def pool(slots=2, capacity=8) -> SlotPool:
    return SlotPool(layers=1, kv_heads=1, head_dim=2, capacity=capacity, slots=slots, dtype=torch.float32, device="cpu")


def test_rows_are_reused_lowest_first_and_the_pool_grows_keeping_what_it_holds():
    p = pool()
    a, b = p.acquire(), p.acquire()
    assert (a.slot, b.slot) == (0, 1)
    a.prefill_mask(3, "cpu")
    a.update(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2), 0)
    a.advance()
    c = p.acquire()  # every row taken: the pool doubles
    assert p.slots == 4 and c.slot == 2 and a.length == 3
    assert torch.equal(p.keys[0][0, :, :3], torch.ones(1, 3, 2))  # copied over
    del a
    gc.collect()
    assert p.acquire().slot == 0  # a dropped sequence gives its row back, and it starts empty
    assert p.lengths[0] == 0


def test_crop_and_capacity():
    p = pool(capacity=4)
    a = p.acquire()
    a.prefill_mask(3, "cpu")
    a.advance()
    a.crop(-2)  # transformers' convention: a negative count drops tokens from the end
    assert a.length == 1
    with pytest.raises(CapacityError, match="exceeds the slot capacity 4"):
        a.prefill_mask(4, "cpu")


def test_a_batch_step_writes_each_row_at_its_own_end_and_masks_it_there():
    p = pool(slots=3)
    rows = [p.acquire() for _ in range(3)]
    for n, r in zip((2, 0, 5), rows, strict=True):
        p.lengths[r.slot] = n
    step = BatchStep(p, [rows[2], rows[0]], "cpu")  # row 1 lies in range and idles
    assert step.rows == 3 and step.read == 8 and step.pos.tolist() == [2, 0, 5]  # read: a bucket, capped at capacity
    key = torch.arange(3, dtype=torch.float32).view(3, 1, 1, 1).expand(3, 1, 1, 2)
    keys, _ = step.update(key, key, 0)
    assert keys.shape == (3, 1, 8, 2)
    assert keys[0, 0, 2].tolist() == [0, 0] and keys[2, 0, 5].tolist() == [2, 2]
    assert step.mask[:, 0, 0].sum(-1).tolist() == [3, 1, 6]
    step.advance()
    assert p.lengths == [3, 0, 6]  # the idle row did not move
    out = step.gather(torch.tensor([10, 11, 12]))
    assert out.tolist() == [12, 10]


@pytest.fixture
def started(tiny):
    """A reply prefilled on the Thinker and the Talker: what a decode step starts from."""
    streamer = OmniStreamer(tiny.model)
    reply = Reply(Conversation(), True, 20, 20)
    with torch.no_grad():
        streamer.prefill(reply, prompter(tiny).turn(audio=noise(1.0, 1), system="Hi."))
        streamer.talker_prefill(reply)
    return streamer, reply


def same_as_compiled(fn, *args):
    """`fn` traced by dynamo as one graph (no break: `fullgraph=True`) gives what it gives eagerly."""
    with torch.no_grad():
        eager = fn(*args)
        torch._dynamo.reset()
        compiled = torch.compile(fn, fullgraph=True, backend="eager")(*args)
    return all(torch.allclose(a, b, atol=1e-5) for a, b in zip(eager, compiled, strict=True))


def test_talker_and_thinker_decode_steps_compile_to_one_graph(started):
    s, reply = started
    talker = BatchStep(s.talker_pool, [reply.talker_cache], s.device)
    pos = s._step_positions(talker, torch.tensor([reply.talker_pos]))
    embeds = torch.randn(1, 1, s.talker.config.text_config.hidden_size, generator=torch.Generator().manual_seed(1))

    def talker_step(embeds, mask, pos):
        out = s.talker(
            inputs_embeds=embeds, attention_mask=mask, position_ids=pos, cache=talker, use_cache=True,
            output_hidden_states=True, generation_step=0,
        )  # fmt: skip
        return out.logits, out.hidden_states[0][-1]

    assert same_as_compiled(talker_step, embeds, talker.mask, pos)
    thinker = BatchStep(s.thinker_pool, [reply.conv.cache], s.device)
    pos = s._step_positions(thinker, torch.tensor([reply.conv.next_pos]))

    def thinker_step(ids, mask, pos):
        return (s.thinker(input_ids=ids, attention_mask=mask, position_ids=pos, cache=thinker, use_cache=True).logits,)

    assert same_as_compiled(thinker_step, torch.tensor([[reply.tokens[-1]]]), thinker.mask, pos)


def test_code2wav_frame_compiles_to_one_graph(started):
    s, _ = started
    hidden = torch.randn(2, 1, s.code2wav.config.hidden_size, generator=torch.Generator().manual_seed(2))
    state: dict = {}
    s.conv_stack.step(hidden, state)  # the first frame fills the contexts; later frames have one shape

    def frame(hidden):
        return (s.conv_stack.step(hidden, dict(state)),)

    assert same_as_compiled(frame, hidden)
