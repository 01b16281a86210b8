"""The cascade's replies from any OpenAI-compatible chat model (Ollama, llama.cpp's server, vLLM, hosted).

Streamed: the reply is cut into sentences as its tokens arrive, so the first
sentence can be spoken while the rest is still being written. In the car the
model gets the vehicle tools; its calls run through the same validated `Car`
as the keyword policy's, the results go back to it, and it speaks the
outcome. The request belongs to an asyncio task: cancelling the task (the
user went on talking, or barged in) closes the stream, and with it the
connection, so no stale words are spoken or paid for.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from agent.config import LlmConfig
from agent.profiles import Profile
from agent.profiles.car import TOOLS, Car
from agent.profiles.prompts import CAR_PROMPT, DEFAULT_PROMPT, translate_prompt

log = logging.getLogger(__name__)

SPOKEN = " Your words are spoken aloud: plain sentences, no markdown, lists or emoji."
# A sentence is complete once its end mark is followed by a space (so "3.5" or "e.g." mid-token does not cut it).
SENTENCE = re.compile(r"(.+?[.!?…。！？]+[\"'”’)\]]*)\s+", re.S)
APOLOGY = "Sorry, I can't reach my language model right now."


class LlmError(Exception):
    """The chat model could not give a reply: unreachable, refused, too slow, or a stream that made no sense."""


@dataclass(frozen=True, slots=True)
class Sentence:
    text: str


@dataclass(frozen=True, slots=True)
class ToolRun:
    call: dict[str, Any]  # {"name", "arguments", "result"} as the car returned it


@dataclass
class Timings:
    first_token_ms: float | None = None
    first_sentence_ms: float | None = None


class ChatModel:
    """One client per engine, shared by its sessions."""

    def __init__(self, cfg: LlmConfig) -> None:
        if not cfg.model:
            raise ValueError("a chat model needs a name: --llm-model NAME (or OMNI_LLM_MODEL)")
        from openai import AsyncOpenAI
        from openai.types.chat import ChatCompletionChunk

        self.cfg = cfg
        self.client = AsyncOpenAI(
            base_url=cfg.url, api_key=cfg.key or "unused", timeout=cfg.timeout_s, max_retries=cfg.retries
        )
        # Build the chunk type's validators now, not inside the first user's first reply (~1 s on a slow CPU).
        ChatCompletionChunk.model_validate(
            {"id": "", "object": "chat.completion.chunk", "created": 0, "model": "", "choices": []}
        )

    async def close(self) -> None:
        await self.client.close()


class LlmDialog:
    """One session's side of the conversation with the chat model: its prompt, its tools, its context."""

    def __init__(self, model: ChatModel, profile: Profile, options: dict[str, Any], car: Car | None = None) -> None:
        self.model = model
        self.cfg = model.cfg
        self.profile = profile
        self.car = car if profile.vehicle else None
        self.target = str(options.get("target_lang", "es"))
        if profile.interpreting:
            self.system = translate_prompt(str(options.get("source_lang", "en")), self.target)
            self.system += " Reply with the translation only."
        elif self.car is not None:
            self.system = CAR_PROMPT + SPOKEN
        else:
            self.system = DEFAULT_PROMPT + SPOKEN
        self.timings = Timings()

    @property
    def lang(self) -> str:
        """The language of the replies."""
        return self.target if self.profile.interpreting else "en"

    def messages(self, text: str, history: list[tuple[str, str]], now: dt.datetime, faces: int | None) -> list:
        system = self.system
        if not self.profile.interpreting:
            seen = "off" if faces is None else f"on, {faces} {'person' if faces == 1 else 'people'} in view"
            system += f"\n\nNow: {now.strftime('%A, %B')} {now.day}, {now.year}, {now.strftime('%H:%M')}."
            system += f" The user's camera is {seen}."
        if self.car is not None:
            system += f"\nThe car now: {json.dumps(self.car.state.snapshot())}"
        kept: list[tuple[str, str]] = []
        budget = self.cfg.history_chars
        for user, assistant in reversed([] if self.profile.interpreting else history):
            budget -= len(user) + len(assistant)
            if budget < 0:
                break
            kept.insert(0, (user, assistant))
        msgs: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for user, assistant in kept:
            msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        return [*msgs, {"role": "user", "content": text}]

    async def reply(self, messages: list[dict[str, Any]]) -> AsyncIterator[Sentence | ToolRun]:
        """The reply as it comes: tool runs, then sentences. LlmError if the model fails."""
        self.timings = Timings()
        t0 = time.perf_counter()
        tools = TOOLS if self.car is not None else None
        for _ in range(self.cfg.tool_rounds + 1):
            text, calls = "", {}
            async for kind, value in self._stream(messages, tools):
                if self.timings.first_token_ms is None:
                    self.timings.first_token_ms = (time.perf_counter() - t0) * 1000
                if kind == "text":
                    text += value
                    while m := SENTENCE.match(text):
                        text = text[m.end() :]
                        yield self._sentence(m.group(1), t0)
                else:
                    calls = value
            if text.strip():
                yield self._sentence(text.strip(), t0)
            if not calls or self.car is None:
                return
            messages = [*messages, {"role": "assistant", "content": None, "tool_calls": list(calls.values())}]
            for c in calls.values():
                run = self._run(c)
                yield ToolRun(run)
                result = {"ok": run["result"]["ok"], "message": run["result"]["message"]}
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": json.dumps(result)})
            tools = TOOLS
        log.info("llm: tool calls still coming after %d rounds; the turn ends here", self.cfg.tool_rounds)

    def _sentence(self, text: str, t0: float) -> Sentence:
        if self.timings.first_sentence_ms is None:
            self.timings.first_sentence_ms = (time.perf_counter() - t0) * 1000
        return Sentence(text)

    def _run(self, call: dict[str, Any]) -> dict[str, Any]:
        assert self.car is not None
        fn = call["function"]
        try:
            args = json.loads(fn["arguments"] or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            state = self.car.state.snapshot()
            result = {"ok": False, "message": "the tool call's arguments are not a JSON object", "state": state}
            return {"name": fn["name"], "arguments": {}, "result": result}
        return {"name": fn["name"], "arguments": args, "result": self.car.call(fn["name"], args)}

    async def _stream(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> AsyncIterator[tuple[str, Any]]:
        """("text", piece) as they come, then ("calls", {index: call}) if the model called tools."""
        import openai

        calls: dict[int, dict[str, Any]] = {}
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        try:
            stream = await self.model.client.chat.completions.create(
                model=self.cfg.model,
                messages=messages,
                stream=True,
                max_tokens=self.cfg.max_tokens,
                **extra,
            )
            async with stream:
                async for chunk in stream:
                    for choice in chunk.choices:
                        delta = choice.delta
                        if delta.content:
                            yield "text", delta.content
                        for tc in delta.tool_calls or ():
                            c = calls.setdefault(
                                tc.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                            )
                            c["id"] = tc.id or c["id"]
                            if tc.function is not None:
                                c["function"]["name"] += tc.function.name or ""
                                c["function"]["arguments"] += tc.function.arguments or ""
        except openai.AuthenticationError as exc:
            raise LlmError(f"the chat model refused the key ({exc.status_code})") from None
        except openai.APITimeoutError:
            raise LlmError(f"the chat model gave nothing for {self.cfg.timeout_s:g} s") from None
        except openai.APIConnectionError as exc:
            raise LlmError(f"the chat model at {self.cfg.url} cannot be reached ({exc.__cause__ or exc})") from None
        except openai.APIStatusError as exc:
            raise LlmError(f"the chat model answered {exc.status_code}: {_short(exc.message)}") from None
        except (openai.APIError, ValueError, KeyError, TypeError, AttributeError) as exc:
            why = f"{type(exc).__name__}: {_short(str(exc))}"
            raise LlmError(f"the chat model's stream made no sense ({why})") from None
        if calls:
            yield "calls", {i: calls[i] for i in sorted(calls) if calls[i]["function"]["name"]}


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
