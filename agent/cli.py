"""`omni-agent`: the command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import io
import logging
import os
import signal
import sys

from agent.config import PROFILES, Config, ConfigError, load_config
from agent.engines import ENGINES


def _serve_args(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the page and the signalling WebSocket")
    p.add_argument("--config", help="a YAML profile (configs/default.yaml when omitted)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8080; 0 picks a free one)")
    p.add_argument("--engine", choices=ENGINES, help="engine to run (default from the config)")
    p.add_argument("--mode", help="engine mode (echo: stream | turn); --engine echo defaults to stream")
    p.add_argument("--profile", choices=PROFILES)
    p.add_argument("--realtime-url", help="with --engine realtime: the ws(s)://.../v1/realtime server to use")
    p.add_argument(
        "--realtime-dialect",
        choices=("openai", "vllm-omni", "vllm-omni-turn", "dynamo"),
        help="with --engine realtime: the kind of server (default openai: its VAD ends turns)",
    )
    p.add_argument("--llm-url", help="with --engine cascade: an OpenAI-compatible base URL for the replies")
    p.add_argument("--llm-model", help="with --llm-url: the chat model's name (the key: OMNI_LLM_KEY)")
    p.add_argument("--model", help="with --engine qwen3-omni: a local Qwen3-Omni folder (or a hub id with a network)")
    p.add_argument("--device", help="with --engine qwen3-omni: cuda, cuda:1 or cpu (default: cuda when present)")
    p.add_argument("--batch-limit", type=int, help="with --engine qwen3-omni: sessions per batched step (default 8)")
    p.add_argument(
        "--no-cuda-graphs",
        action="store_true",
        help="with --engine qwen3-omni on CUDA: run the decode steps without CUDA graphs",
    )
    p.add_argument("--max-sessions", type=int, help="concurrent sessions before new ones get `busy`")
    p.add_argument("--ice-server", action="append", default=None, help="a STUN/TURN URL; repeatable")
    p.add_argument("--host-address", action="append", default=None, help="offer only these host candidates; repeatable")
    p.add_argument("--turn-username", help="static TURN credentials (better: OMNI_TURN_USERNAME; ps shows arguments)")
    p.add_argument("--turn-credential", help="... and password (better: OMNI_TURN_CREDENTIAL)")
    p.add_argument(
        "--turn-secret", help="coturn's static-auth-secret: credentials minted per request (better: OMNI_TURN_SECRET)"
    )
    p.add_argument(
        "--ice-relay-only",
        action="store_true",
        default=None,
        help="both peers use relayed (TURN) candidates alone; TURN credentials: OMNI_TURN_USERNAME and "
        "OMNI_TURN_CREDENTIAL, or OMNI_TURN_SECRET (coturn's use-auth-secret)",
    )
    p.add_argument(
        "--echo-cancellation",
        choices=["auto", "on", "off"],
        help="cancel the agent's voice in the microphone's audio: auto (clients that do not cancel it), on, off",
    )
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--token", help="a shared token required in every offer (or set OMNI_AGENT_TOKEN)")
    p.add_argument(
        "--operator-token", help="a bearer token required by /metrics and /healthz (or set OMNI_OPERATOR_TOKEN)"
    )
    p.add_argument("--cert", help="TLS certificate (PEM); with --key serves https and wss")
    p.add_argument("--key", help="TLS private key (PEM)")
    p.add_argument(
        "--self-signed",
        action="store_true",
        help="make (once) and use a certificate for this machine: https for phones",
    )
    p.add_argument("--workers", type=int, default=1, help="server processes sharing the port (SO_REUSEPORT)")
    p.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--metrics-dir", help=argparse.SUPPRESS)
    p.add_argument("--transcripts", help="folder for session transcripts (JSON lines); '' turns them off")


def build_config(args: argparse.Namespace) -> Config:
    from agent.config import CONFIG_DIR

    cfg = load_config(args.config or CONFIG_DIR / "default.yaml")
    if args.host is not None:
        cfg.server.host = args.host
    if args.port is not None:
        cfg.server.port = args.port
    if args.engine is not None:
        if args.engine != cfg.engine.name:
            cfg.engine.mode = "stream" if args.engine == "echo" else cfg.engine.mode
        cfg.engine.name = args.engine
        if args.engine == "echo" and args.mode is None:
            cfg.engine.mode = "stream"
    if args.mode is not None:
        cfg.engine.mode = args.mode
    if args.profile is not None:
        cfg.profile = args.profile
    if args.realtime_url is not None:
        cfg.engine.options["url"] = args.realtime_url
    if args.realtime_dialect is not None:
        cfg.engine.options["dialect"] = args.realtime_dialect
    if args.llm_url is not None:
        cfg.engine.llm.url = args.llm_url
    if args.llm_model is not None:
        cfg.engine.llm.model = args.llm_model
    for name in ("model", "device", "batch_limit"):
        if getattr(args, name) is not None:
            cfg.engine.options[name] = getattr(args, name)
    if args.no_cuda_graphs:
        cfg.engine.options["cuda_graphs"] = False
    if args.max_sessions is not None:
        cfg.server.max_sessions = args.max_sessions
    if args.ice_server is not None:
        cfg.ice.servers = args.ice_server
    if args.host_address is not None:
        cfg.ice.host_addresses = args.host_address
    if args.ice_relay_only:
        cfg.ice.relay_only = True
    for name in ("username", "credential", "secret"):
        if getattr(args, f"turn_{name}") is not None:
            setattr(cfg.ice, name, getattr(args, f"turn_{name}"))
    if args.echo_cancellation is not None:
        cfg.media.echo_cancellation = args.echo_cancellation
    if args.log_level is not None:
        cfg.log_level = args.log_level
    if args.token is not None:
        cfg.server.token = args.token
    if args.operator_token is not None:
        cfg.server.operator_token = args.operator_token
    if bool(args.cert) != bool(args.key):
        raise ConfigError("--cert and --key go together")
    if args.cert:
        cfg.server.cert, cfg.server.key = args.cert, args.key
    if args.self_signed:
        from pathlib import Path

        from agent.server.access import self_signed

        folder = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "omni-agent" / "tls"
        cfg.server.cert, cfg.server.key = self_signed(folder)
    if args.transcripts is not None:
        cfg.server.transcripts_dir = args.transcripts
    cfg.server.reuse_port = args.reuse_port
    cfg.server.metrics_dir = args.metrics_dir or ""
    return cfg


def _without(argv: list[str], *options: str) -> list[str]:
    """argv less the given options and their values."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in options:
            skip = True
        elif not any(a.startswith(o + "=") for o in options):
            out.append(a)
    return out


async def serve(cfg: Config) -> None:
    from agent.server import AgentServer
    from agent.server.process import tune_for_real_time
    from agent.transport.ice import set_host_addresses

    set_host_addresses(cfg.ice.host_addresses)  # process-wide, as aioice's own gathering is
    server = AgentServer(cfg)
    await server.start()
    tune_for_real_time()
    mode = f" ({cfg.engine.mode})" if cfg.engine.name == "echo" else ""
    print(f"omni-agent: engine {cfg.engine.name}{mode}, profile {cfg.profile}", flush=True)
    print(f"omni-agent: open {server.url} in a browser (Ctrl-C to stop)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    grace = cfg.server.shutdown_grace_s
    print(f"omni-agent: stopping (live sessions get {grace:g} s to finish)", flush=True)
    await server.shutdown(grace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="omni-agent", description="A real-time voice and video agent.")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_args(sub)
    bench = sub.add_parser("bench", help="voice-to-voice latency under load: table, JSON and PNG")
    from agent.bench import add_args

    add_args(bench)
    args = parser.parse_args(argv)
    if args.command == "bench":
        logging.basicConfig(level="WARNING")
        from agent.bench import run

        return run(args)
    try:
        cfg = build_config(args)
    except ConfigError as exc:
        print(f"omni-agent: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with contextlib.suppress(io.UnsupportedOperation):  # a stderr with no file (captured) has nowhere to write it
        faulthandler.enable()  # a native crash or an abort prints every thread's stack, not only a signal's number
    logging.getLogger("aioice").setLevel(logging.WARNING)
    logging.getLogger("aiortc").setLevel(logging.WARNING)
    logging.getLogger("websockets.server").setLevel(logging.WARNING)
    if args.command == "serve" and args.workers > 1:
        from agent.server.workers import free_port, run_workers

        port = cfg.server.port or free_port(cfg.server.host)
        rest = _without(list(argv if argv is not None else sys.argv[1:]), "--workers", "--port")
        return run_workers(rest, args.workers, cfg.server.host, port)
    if args.command == "serve":
        try:
            asyncio.run(serve(cfg))
        except OSError as exc:
            print(f"omni-agent: cannot listen on {cfg.server.host}:{cfg.server.port}: {exc}", file=sys.stderr)
            return 1
        except ValueError as exc:
            print(f"omni-agent: {exc}", file=sys.stderr)
            return 2
        except RuntimeError as exc:  # ModelLoadError: no model folder, files missing, too little GPU memory
            from agent.engines.qwen3_omni.loading import ModelLoadError

            if not isinstance(exc, ModelLoadError):
                raise
            print(f"omni-agent: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
