"""Configuration: a YAML profile file, overridden by the command line.

Every limit has a safe default here so that a missing key never means
"unbounded".
"""

from __future__ import annotations

import copy
import importlib.resources
import os
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import yaml

from agent.profiles import NAMES as PROFILES
from media.turn_taking import BACKCHANNEL_SAYINGS, BACKCHANNELS, STOP_SAYINGS, InterruptionConfig

T = TypeVar("T")

# The profiles and the page are package data (`agent/configs`, `agent/web`: in a checkout, links to the
# top-level folders), so an installed wheel finds them without the source tree
_PACKAGE = Path(str(importlib.resources.files("agent")))
CONFIG_DIR = _PACKAGE / "configs"


class ConfigError(ValueError):
    pass


def switch_or_fields(cls: type[T], value: Any, where: str) -> T:
    """An engine option that is true (the defaults), false (`enabled=False`) or a mapping of `cls`'s fields."""
    if value is None or value is True:
        return cls()
    if value is False:
        return cls(enabled=False)  # type: ignore[call-arg]
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected true, false or a mapping, got {value!r}")
    known = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ValueError(f"{where}: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    return cls(**value)


def default_transcripts_dir() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "omni-agent", "transcripts")


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    max_sessions: int = 8
    max_message_bytes: int = 64 * 1024
    max_sdp_bytes: int = 32 * 1024
    max_m_lines: int = 4
    messages_per_second: float = 20.0  # per session, with bursts of twice that
    max_session_s: float = 3600.0  # a session ends after this long
    shutdown_grace_s: float = 5.0  # on SIGTERM, live sessions get this long to finish
    web_dir: str = str(_PACKAGE / "web")
    # access: a shared token required in the offer (or OMNI_AGENT_TOKEN); origins
    # allowed besides same-origin and this machine's pages; TLS certificate and key
    token: str = ""
    # a bearer token for /metrics and /healthz (or OMNI_OPERATOR_TOKEN); empty: they answer anyone
    operator_token: str = ""
    allowed_origins: list[str] = field(default_factory=list)
    cert: str = ""
    key: str = ""
    # set by `serve --workers N` for its worker processes
    reuse_port: bool = False
    metrics_dir: str = ""
    # one JSON-lines file per session; "" turns transcripts off
    transcripts_dir: str = field(default_factory=default_transcripts_dir)


@dataclass
class IceConfig:
    # No STUN by default: a public server is often unreachable (and leaks the
    # user's address to a third party). Add "stun:host:port" entries to use one.
    servers: list[str] = field(default_factory=list)
    # The addresses the server offers as host candidates. Empty means all of
    # this machine's addresses plus 127.0.0.1 (aioice leaves loopback out).
    host_addresses: list[str] = field(default_factory=list)
    # Credentials for the turn:/turns: servers, the page's and the server's own peer: static ones (or
    # OMNI_TURN_USERNAME, OMNI_TURN_CREDENTIAL), or time-limited ones minted per request from a shared secret
    # (coturn's use-auth-secret, the TURN REST scheme; or OMNI_TURN_SECRET), valid for `credential_ttl_s`
    username: str = ""
    credential: str = ""
    secret: str = ""
    credential_ttl_s: int = 86400
    relay_only: bool = False  # both peers use relayed candidates alone (testing; hiding addresses)

    def with_environment(self) -> IceConfig:
        """With the environment's credentials where the config has none (secrets stay out of files and `ps`)."""
        return replace(
            self,
            username=self.username or os.environ.get("OMNI_TURN_USERNAME", ""),
            credential=self.credential or os.environ.get("OMNI_TURN_CREDENTIAL", ""),
            secret=self.secret or os.environ.get("OMNI_TURN_SECRET", ""),
        )

    def __repr__(self) -> str:  # a config printed or logged never shows a secret
        hidden = {"credential": "(hidden)" if self.credential else "", "secret": "(hidden)" if self.secret else ""}
        return f"IceConfig({ {**asdict(self), **hidden} })"


ECHO_CANCELLATION = ("auto", "on", "off")
JITTER_BUFFER = ("adaptive", "off")


@dataclass
class MediaConfig:
    video_fps: float = 2.0
    # Inbound audio: "adaptive" waits for a missing packet only as long as the line's jitter, then rebuilds it
    # from the next one's FEC or conceals it (media/jitter.py); "off" uses each packet on arrival and drops one
    # that comes after a later one (the aligner fills the gap with silence).
    jitter_buffer: str = "adaptive"
    queue_ticks: int = 50  # 4 s of audio between aligner and engine
    output_backlog_ms: int = 400  # cap for generated speech queued in the framer
    # Live (echo stream) output: beyond one 80 ms frame + 20 ms the backlog sheds
    # silence; beyond live_backlog_max_ms it drops sound rather than lag.
    live_backlog_ms: int = 100
    live_backlog_max_ms: int = 200
    output_lead_ms: int = 120  # generated speech is fed this far ahead of playback
    # A session whose audio stops (a dead track, a vanished client, ICE gone)
    # ends after this long; also the limit for the connection to come up.
    audio_timeout_s: float = 10.0
    max_video_pixels: int = 1920 * 1088  # larger frames end the session with an error
    turn_deadline_s: float = 30.0  # an engine silent this long inside a turn is stopped (a hang, not a long reply)
    # The agent's own voice cancelled in what the client's microphone sent (media/echo_cancel.py): "auto" for
    # every client that does not say it cancels echo itself (the page says so unless ?raw), "on", "off".
    echo_cancellation: str = "auto"
    # ... and while it cancels, a voice over the agent's found at its onset (media/double_talk.py): speech over a
    # reply held a tick or two before VAD hears it in what AEC3 left. Off by default: over WebRTC (Opus both ways)
    # it took 17 ms off the median barge-in in one room and nothing in another, for five times the one-tick
    # holds of replies no one spoke over (docs/benchmarks.md)
    echo_onset: bool = False
    # Speech over a sounding reply listened to as its audio arrives (20 ms packets), not once its 80 ms tick is
    # whole: a voice holds the reply up to a tick sooner (media/early_hold.py); the tick's judgement confirms it
    early_hold: bool = True
    # ... and speech over a reply recognised from speex's linear echo filter, run beside AEC3, whose suppressor
    # takes a voice's first few hundred ms in the echo's tail for echo (media/echo_cancel.py, `heard`)
    linear_heard: bool = True


@dataclass
class LlmConfig:
    """The cascade's replies from an OpenAI-compatible chat-completions server (agent/engines/cascade/llm.py).
    Without a URL the cascade answers with its offline keyword policies."""

    url: str = ""  # a base URL such as http://127.0.0.1:11434/v1 (Ollama); or OMNI_LLM_URL
    model: str = ""  # or OMNI_LLM_MODEL
    key: str = ""  # prefer OMNI_LLM_KEY: a key in a file is a key on disk
    timeout_s: float = 10.0  # to connect, and between two chunks of a streamed reply
    retries: int = 1  # further tries of a request that failed to connect or was refused for load
    max_tokens: int = 256  # a spoken reply is short
    history_chars: int = 6000  # the conversation kept for context; the oldest turns go first
    tool_rounds: int = 3  # tool calls answering tool results, before the turn ends without more

    def resolved(self) -> LlmConfig:
        """With the environment's values where the config has none."""
        return LlmConfig(
            url=self.url or os.environ.get("OMNI_LLM_URL", ""),
            model=self.model or os.environ.get("OMNI_LLM_MODEL", ""),
            key=self.key or os.environ.get("OMNI_LLM_KEY", ""),
            timeout_s=self.timeout_s,
            retries=self.retries,
            max_tokens=self.max_tokens,
            history_chars=self.history_chars,
            tool_rounds=self.tool_rounds,
        )


# The silence after speech that ends a turn, unless a judged pause ends it sooner: the one default, for the
# YAML and for an engine built without a config (tests, benchmarks). A profile's own is in its YAML.
END_SILENCE_MS = 480


@dataclass
class EngineConfig:
    name: str = "cascade"
    mode: str = "turn"  # echo: stream | turn
    end_silence_ms: int = END_SILENCE_MS
    options: dict[str, Any] = field(default_factory=dict)
    llm: LlmConfig = field(default_factory=LlmConfig)


@dataclass
class OverloadConfig:
    """The overload policy's thresholds on recent p95s, and how fast it moves (agent/server/overload.py).

    From `omni-agent bench --replay` with the server on one core (docs/benchmarks.md, capacity): the levels
    it held kept the loop-lag p95 at 2.5-7.5 ms on the AVX-512 EPYC (at 5-25 ms on the slower AVX2 one, before
    the camera decoders ran on idle time), and it fell behind from 10-15 ms; 25 ms is the least that no held
    level reached on either, so the policy never sheds a load the server holds (the whole test suite peaks
    at 11 ms). Two cascade talkers at once on one core put the first speech frame ~0.9-1.1 s after the end
    of the turn (p50-p95)."""

    first_audio_p95_ms: float = 1500.0
    loop_lag_p95_ms: float = 25.0
    escalate_s: float = 2.0  # pressure this long moves one level up
    recover_s: float = 10.0  # calm this long moves one level down
    window_s: float = 30.0  # samples older than this no longer count (a text-only server has no speech to time)


@dataclass
class InterruptionsConfig:
    """Speech over the agent's reply, judged (media/turn_taking.py): the reply is held, then resumed for a
    backchannel, a cough or noise, cancelled for words that mean it."""

    judge: bool = True  # false: any speech over the reply cancels it at once
    commit_ms: int = 1200  # speech over the reply this long cancels it, whatever it says
    resume_silence_ms: int = 320  # that speech has stopped after this much silence (not a gap mid-sentence)
    words_wait_ms: int = 400  # after it stopped, how long its words may take to be heard
    confirm_without_words_ms: int = 560  # engines that hear no words of their own: speech this long cancels
    continuation_ms: int = 1500  # speech cancelling the reply this soon after the user's turn ended continues it
    backchannels: list[str] = field(default_factory=lambda: sorted(BACKCHANNELS))
    # Where one of these is at most `sayings_within` (natural log) less likely than the words heard over the reply,
    # the likelier kind decides: a backchannel resumes the reply, a stop cancels it
    backchannel_sayings: list[str] = field(default_factory=lambda: list(BACKCHANNEL_SAYINGS))
    stop_sayings: list[str] = field(default_factory=lambda: list(STOP_SAYINGS))
    sayings_within: float = 2.5
    # Words beyond backchannels judged by what they say (agent/profiles/interruption_words.py): a classifier's
    # probability that they mean to interrupt, from this much they cancel; false: three words cancel, fewer
    # only with a stop word
    words_model: bool = True
    meant_from: float = 0.5
    # ... read only where the recogniser was sure of them: at this log-likelihood per token or below, it guessed
    unsure_below: float = -1.0

    def judging(self) -> InterruptionConfig:
        return InterruptionConfig(
            judge=self.judge,
            commit_ms=self.commit_ms,
            resume_silence_ms=self.resume_silence_ms,
            words_wait_ms=self.words_wait_ms,
            confirm_without_words_ms=self.confirm_without_words_ms,
            backchannels=frozenset(w.lower() for w in self.backchannels),
            backchannel_sayings=tuple(self.backchannel_sayings),
            stop_sayings=tuple(self.stop_sayings),
            sayings_within=self.sayings_within,
            meant_from=self.meant_from,
            unsure_below=self.unsure_below,
            words_model=self.words_model,
            continuation_ms=self.continuation_ms,
        )


@dataclass
class UnderstandingConfig:
    """A spoken request the offline assistant would not act on is read again leaning toward its words
    (agent/engines/cascade/second_reading.py; chosen on the examples: `python -m benchmarks.phrase_bias`), and
    where it would still not act, heard by Whisper tiny.en too (second_opinion.py; chosen on the corpora:
    `python -m benchmarks.understanding --spoken`)."""

    second_reading: bool = True
    bonus: float = 2.0  # log-likelihood added to each token of the assistant's words
    within: float = 1.0  # how much less likely than the first reading (natural log) the second may be
    # Off unless the profile's YAML says (the car's does): a turn not acted on waits for Whisper, and the default
    # assistant's turns are often talk it has no skill for, where Whisper only delays the answer
    second_opinion: bool = False
    opinion_within: float = 20.0  # how much less likely than its own reading Moonshine may find Whisper's
    opinion_below: float = -0.1  # asked only where Moonshine was this sure of its reading or less (a token)

    def reading(self) -> tuple[float, float] | None:
        return (self.bonus, self.within) if self.second_reading else None

    def opinion(self) -> tuple[float, float] | None:
        return (self.opinion_within, self.opinion_below) if self.second_opinion else None


@dataclass
class TranslateConfig:
    source_lang: str = "en"
    target_lang: str = "es"


@dataclass
class Config:
    profile: str = "default"
    log_level: str = "info"
    server: ServerConfig = field(default_factory=ServerConfig)
    ice: IceConfig = field(default_factory=IceConfig)
    media: MediaConfig = field(default_factory=MediaConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    translate: TranslateConfig = field(default_factory=TranslateConfig)
    overload: OverloadConfig = field(default_factory=OverloadConfig)
    interruptions: InterruptionsConfig = field(default_factory=InterruptionsConfig)
    understanding: UnderstandingConfig = field(default_factory=UnderstandingConfig)

    def session_options(self) -> dict[str, Any]:
        """What an engine session of this profile needs to know."""
        return {
            "end_silence_ms": self.engine.end_silence_ms,
            "source_lang": self.translate.source_lang,
            "target_lang": self.translate.target_lang,
            "interruptions": self.interruptions.judging(),
            "second_reading": self.understanding.reading(),
            "second_opinion": self.understanding.opinion(),
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _merge(obj: Any, data: dict[str, Any], where: str) -> None:
    known = {f.name: f for f in fields(obj)}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(known)})")
        current = getattr(obj, key)
        if is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{key}: expected a mapping")
            _merge(current, value, f"{where}.{key}")
        else:
            if isinstance(current, str) and isinstance(value, bool):
                value = "on" if value else "off"  # YAML 1.1 reads an unquoted on or off as a boolean
            if (
                current is not None
                and not isinstance(value, type(current))
                and not (isinstance(current, float) and isinstance(value, int))
            ):
                raise ConfigError(f"{where}.{key}: expected {type(current).__name__}, got {value!r}")
            setattr(obj, key, value)


def load_config(path: str | Path | None = None) -> Config:
    cfg = Config()
    if path is None:
        return cfg
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level")
    _merge(cfg, data, p.name)
    if cfg.profile not in PROFILES:
        raise ConfigError(f"{p.name}: profile must be one of {', '.join(PROFILES)}")
    if cfg.media.jitter_buffer not in JITTER_BUFFER:
        raise ConfigError(f"{p.name}: media.jitter_buffer must be one of {', '.join(JITTER_BUFFER)}")
    if cfg.media.echo_cancellation not in ECHO_CANCELLATION:
        raise ConfigError(f"{p.name}: media.echo_cancellation must be one of {', '.join(ECHO_CANCELLATION)}")
    if not 0 < cfg.media.live_backlog_ms <= cfg.media.live_backlog_max_ms:
        raise ConfigError(f"{p.name}: media.live_backlog_ms must be above 0 and at most media.live_backlog_max_ms")
    return cfg


def profile_config(base: Config, profile: str) -> Config:
    """`base` with the profile's own settings (configs/<profile>.yaml) for a session
    that asked for another profile than the server's."""
    if profile == base.profile:
        return base
    path = CONFIG_DIR / f"{profile}.yaml"
    own = load_config(path) if path.is_file() else Config(profile=profile)
    merged = copy.deepcopy(base)
    merged.profile = profile
    merged.engine.end_silence_ms = own.engine.end_silence_ms
    merged.translate = own.translate
    merged.understanding.second_opinion = own.understanding.second_opinion
    return merged
