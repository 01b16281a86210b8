"""Through a real TURN server: Debian's coturn, started here, between a server and a client in network
namespaces of their own that reach the TURN server but not each other (veth pairs into this test's namespace,
which forwards nothing; addresses 10.77.1.0/24 and 10.77.2.0/24, the test's own). The signalling goes through
a TCP relay in this namespace, as through a load balancer; the media can only go through TURN."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.harness import turn_server
from tests.support import loopback_only

ROOT = Path(__file__).resolve().parents[3]
SECRET = "relay-test-secret"
SERVER, CLIENT = ("10.77.1.1", "10.77.1.2"), ("10.77.2.1", "10.77.2.2")  # (this namespace's end, theirs)
PORT = 8080

pytestmark = pytest.mark.skipif(
    not loopback_only(), reason="makes network namespaces and veth pairs: needs root in scripts/test.sh's namespace"
)


@contextlib.contextmanager
def namespace(name: str, addresses: tuple[str, str]) -> Iterator[list[str]]:
    """A new network namespace joined to this one by a veth pair, its default route this end; yields the prefix
    that runs a command in it. Gone (and its veth pair with it) when its holder ends."""
    ours, theirs = addresses
    holder = subprocess.Popen(["unshare", "-n", "sleep", "600"])
    enter = ["nsenter", "-t", str(holder.pid), "-n"]
    try:
        for _ in range(100):  # bounded: until unshare has made the namespace
            if os.readlink(f"/proc/{holder.pid}/ns/net") != os.readlink("/proc/self/ns/net"):
                break
            time.sleep(0.02)
        veth = ["ip", "link", "add", f"{name}0", "type", "veth", "peer", "name", f"{name}1", "netns", str(holder.pid)]
        for command in (
            veth,
            ["ip", "addr", "add", f"{ours}/24", "dev", f"{name}0"],
            ["ip", "link", "set", f"{name}0", "up"],
            [*enter, "ip", "link", "set", "lo", "up"],
            [*enter, "ip", "addr", "add", f"{theirs}/24", "dev", f"{name}1"],
            [*enter, "ip", "link", "set", f"{name}1", "up"],
            [*enter, "ip", "route", "add", "default", "via", ours],
        ):
            subprocess.run(command, check=True)
        yield enter
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["ip", "link", "del", f"{name}0"], check=False, capture_output=True)


async def forward(listen: str, to: str, port: int) -> asyncio.Server:
    """The signalling's way between the two namespaces: TCP from `listen`:port relayed to `to`:port."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(to, port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return await asyncio.start_server(accept, listen, port)


async def relayed_session(
    tmp_path: Path, server_secret: str, turn_url: str = f"turn:{SERVER[0]}:3478"
) -> tuple[dict, str]:
    """A session of the client's through the relay; what the client printed, and the server's log."""
    env = {**os.environ, "OMNI_TURN_SECRET": server_secret, "PYTHONPATH": str(ROOT)}
    serve = [sys.executable, "-m", "agent.cli", "serve", "--engine", "echo", "--mode", "turn", "--host", SERVER[1],
             "--port", str(PORT), "--host-address", SERVER[1], "--ice-server", turn_url,
             "--ice-relay-only", "--transcripts", ""]  # fmt: skip
    turn = turn_server(tmp_path, [SERVER[0], CLIENT[0]], SECRET)
    with namespace("vs", SERVER) as server_ns, namespace("vc", CLIENT) as client_ns, turn:
        server = subprocess.Popen([*server_ns, *serve], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)  # fmt: skip
        relay = None
        try:
            said_at_start = []  # bounded: its URL once it listens, then what the TURN server said to its check
            while len(said_at_start) < 100 and not any("TURN server" in line for line in said_at_start):
                said_at_start.append(line := await asyncio.to_thread(server.stdout.readline))
                if not line:
                    break
            relay = await forward(CLIENT[0], SERVER[1], PORT)
            said = [
                sys.executable,
                "-m",
                "tests.agent.transport.relay_client",
                f"http://{CLIENT[0]}:{PORT}",
                str(tmp_path),
            ]
            client = subprocess.Popen([*client_ns, *said], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
            try:
                out, _ = await asyncio.to_thread(client.communicate, timeout=90)
            except subprocess.TimeoutExpired:
                client.kill()
                out, _ = await asyncio.to_thread(client.communicate)
            assert out.strip(), "the client printed nothing"
            result = json.loads(out.strip().splitlines()[-1]) if out.strip().endswith("}") else {"output": out}
        finally:
            if relay is not None:
                relay.close()
            server.terminate()
            log, _ = await asyncio.to_thread(server.communicate, timeout=30)
    return result, "".join(said_at_start) + log


@pytest.mark.parametrize("url", [f"turn:{SERVER[0]}:3478", f"turn:{SERVER[0]}:3478?transport=tcp"])
async def test_a_spoken_turn_is_answered_through_the_turn_relay_alone(tmp_path, url):
    """Fails without TURN credentials for both peers (the page's from `/ice`, minted from the shared secret):
    relay-only, neither side has a candidate and the offer is refused."""
    got, log = await relayed_session(tmp_path, SECRET, url)
    print(got, log[-2000:])
    assert f"TURN server {url} allocates relays" in log
    ice = got["ice"]
    assert ice["iceTransportPolicy"] == "relay"
    (turn,) = ice["iceServers"]
    assert turn["urls"] == [url] and turn["username"].endswith(":omni-agent")
    assert got.get("refused") is None, got
    assert got["pair"] == ["relay", "relay"]
    assert got["figures"]["type"] == "metrics" and got["peak"] > 0.05  # the echo engine said it back


async def test_a_wrong_turn_credential_is_said_plainly_to_the_client_and_in_the_log(tmp_path):
    """The server's shared secret is not the TURN server's: neither peer gets a relay. The server says so at
    start (aioice drops the refusal silently), and the client's offer is refused saying why."""
    got, log = await relayed_session(tmp_path, "not-the-secret")
    print(got, log[-2000:])
    assert "401" in log and f"TURN server turn:{SERVER[0]}:3478 gives no relay" in log
    assert "not-the-secret" not in log and got["ice"]["iceServers"][0]["credential"] not in log
    assert "TURN server refused the credentials" in got["refused"]
