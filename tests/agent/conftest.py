import contextlib

import pytest

from agent.config import Config
from agent.server import AgentServer


def make_config(engine="echo", mode="stream", **server):
    cfg = Config()
    cfg.engine.name = engine
    cfg.engine.mode = mode
    cfg.engine.end_silence_ms = 480
    cfg.server.port = 0
    cfg.ice.host_addresses = ["127.0.0.1"]
    cfg.server.transcripts_dir = ""  # tests that want transcripts set a folder
    for k, v in server.items():
        setattr(cfg.server, k, v)
    return cfg


@contextlib.asynccontextmanager
async def running(cfg, engine=None):
    server = AgentServer(cfg, engine=engine)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


def ws_url(server):
    return f"ws://127.0.0.1:{server.port}/ws"


@pytest.fixture
def config_factory():
    return make_config
