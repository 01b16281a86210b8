"""docs/production.md's recipe for one cloud machine, run as it stands: its `recipe:serve` block (TLS, the
page's and the operator's tokens, the TURN secret, two workers, TURN over UDP and TCP) and its `recipe:check`
block, with HOST and PUBLIC_IP as 127.0.0.1, a free port for 443, a self-signed certificate for Let's
Encrypt's and Debian's coturn on loopback."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from agent.server.access import self_signed
from agent.server.workers import free_port
from benchmarks.harness import turn_server

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "docs" / "production.md"


def block(name: str) -> str:
    found = re.search(rf"```bash recipe:{name}\n(.*?)```", RECIPE.read_text(), re.S)
    assert found, f"docs/production.md has no recipe:{name} block"
    return "\n".join(line.strip() for line in found.group(1).splitlines())


def test_the_production_recipe_serves_as_it_says(tmp_path):
    """Fails where a step of the recipe does not do what the document says (a flag renamed, an endpoint that
    answers without its token, TURN credentials the page does not get, a TURN server the server cannot use)."""
    cert, key = self_signed(tmp_path / "tls")
    port = free_port("127.0.0.1")
    here = {
        "/etc/letsencrypt/live/HOST/fullchain.pem": cert,
        "/etc/letsencrypt/live/HOST/privkey.pem": key,
        "0.0.0.0": "127.0.0.1",  # tests touch loopback alone
        "--port 443": f"--port {port}",
        "HOST:443": f"127.0.0.1:{port}",
        "HOST": "127.0.0.1",
        "PUBLIC_IP": "127.0.0.1",
        "omni-agent serve": f"{Path(sys.executable).parent / 'omni-agent'} serve --transcripts ''",
        "curl ": f"curl --cacert {cert} ",
    }

    def local(text: str) -> str:
        for theirs, ours in here.items():
            text = text.replace(theirs, ours)
        return text

    with turn_server(tmp_path, ["127.0.0.1"], "TURN_SECRET"):
        serve = subprocess.Popen(["bash", "-c", local(block("serve"))], cwd=tmp_path, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
        try:
            said: list[str] = []
            urls = ("turn:127.0.0.1:3478", "turn:127.0.0.1:3478?transport=tcp")
            relays = [f"TURN server {url} allocates relays" for url in urls]
            while len(said) < 200 and not all(any(r in line for line in said) for r in relays):  # bounded
                said.append(line := serve.stdout.readline())
                if not line:
                    break
            assert all(any(r in line for line in said) for r in relays), "".join(said)  # over UDP and TCP
            answers = []
            for line in local(block("check")).splitlines():
                done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=30)
                assert done.returncode == 0, (line, done.stdout, done.stderr)
                answers.append(done.stdout)
        finally:
            os.killpg(serve.pid, signal.SIGTERM)
            serve.wait(30)
    health, metrics, ice, _page = answers
    assert json.loads(health)["status"] == "ok"
    assert metrics.strip() == "401"  # the operator's endpoint, without the operator's token
    servers = json.loads(ice)["iceServers"]
    assert [s["urls"] for s in servers] == [["turn:127.0.0.1:3478", "turn:127.0.0.1:3478?transport=tcp"]]
    assert servers[0]["username"].endswith(":omni-agent") and servers[0]["credential"]
    output = "".join(said) + (serve.stdout.read() or "")
    assert "TURN_SECRET" not in output and servers[0]["credential"] not in output
