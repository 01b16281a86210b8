"""The conversation as the Thinker reads it, kept within its context.

Touched only by the engine's worker thread. Each new turn is joined after
the system prompt (the first turn) or after the close of the previous
reply; when it would overflow `max_context` with room for a reply, the
oldest turns are cut and the rest is read again from the system prompt.
"""

from __future__ import annotations

from agent.engines.qwen3_omni.prompt import Prompter, join
from agent.engines.qwen3_omni.stream import Conversation, TurnInput

CLOSE = "<|im_end|>\n"
SLACK = 8  # tokens of chat markup around a reply


class ContextWindow:
    def __init__(self, prompter: Prompter, system: str, max_context: int, max_reply_tokens: int) -> None:
        self.prompter = prompter
        self.system = system
        self.max_context = max_context
        self.max_reply_tokens = max_reply_tokens
        self.conv = Conversation()
        self.turns_cut = 0  # turns dropped so far

    def read(self, new: TurnInput, reply_tokens: list[int], speculative: bool = False) -> TurnInput:
        """What the Thinker reads for `new`, whose reply will be `reply_tokens` (filled as it is made).
        A speculative turn is never read across a cut: it raises, and the turn starts afresh at its end."""
        conv, p = self.conv, self.prompter
        if conv.length == 0:
            joined = join(p.system(self.system), [new])
        elif conv.length + len(new.ids) + self.max_reply_tokens + SLACK > self.max_context:
            if speculative:
                raise RuntimeError("no speculation across a context cut")
            joined = self._cut(new)
        else:
            joined = join(p.text_ids(CLOSE), [new])
        conv.turns.append((new, reply_tokens))
        return joined

    def _cut(self, new: TurnInput) -> TurnInput:
        p, conv = self.prompter, self.conv
        kept = list(conv.turns)
        system = p.system(self.system)

        def size() -> int:
            return sum(len(t.ids) + len(r) + 2 for t, r in kept) + len(new.ids) + len(system)

        while kept and size() + self.max_reply_tokens + SLACK > self.max_context:
            kept.pop(0)
            self.turns_cut += 1
        conv.cache, conv.next_pos, conv.role = None, 0, None
        for part in (conv.user_ids, conv.user_embeds, conv.image_grids, conv.audio_lengths):
            part.clear()
        conv.turns[:] = kept
        parts: list[TurnInput | list[int]] = []
        for t, r in kept:
            parts += [t, r[:-1] + p.text_ids(CLOSE)]  # a reply's last token was never read back
        return join(system, [*parts, new])
