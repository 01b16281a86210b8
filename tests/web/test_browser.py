"""The page in a real headless Chromium, fake microphone fed from a WAV file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import loopback_only, speech_wav

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"


def chromium_flags(wav: Path) -> list[str]:
    return [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
        "--autoplay-policy=no-user-gesture-required",
        "--allow-loopback-in-peer-connection",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--no-first-run",
    ]


@pytest.fixture
def server_url(tmp_path):
    """`omni-agent serve` as a user starts it, on a free port."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "serve",
            "--engine",
            "echo",
            "--mode",
            "turn",
            "--port",
            "0",
            "--host-address",
            "127.0.0.1",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = None
    for _ in range(20):
        line = proc.stdout.readline()
        if m := re.search(r"open (http://\S+)", line):
            url = m.group(1)
            break
    assert url, "the server printed no URL"
    yield url
    proc.terminate()
    assert proc.wait(10) == 0, "the server did not stop cleanly on SIGTERM"


@pytest.fixture
def browser_page(tmp_path):
    if not loopback_only():
        pytest.skip(
            "Chromium offers every local address as an ICE candidate; this test runs only in a "
            "loopback-only network namespace (scripts/test.sh provides one when run as root)"
        )
    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian's chromium is not installed; scripts/setup.sh --test installs it")
    from playwright.sync_api import sync_playwright

    wav = speech_wav("Hello there. This is a test of the echo agent.", tmp_path / "speech.wav")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=chromium_flags(wav),
            viewport={"width": 412, "height": 860},
        )
        page = ctx.new_page()
        yield page
        ctx.close()


def test_page_talks_to_echo_agent(server_url, browser_page):
    page = browser_page
    page.goto(server_url + "?raw=1")
    assert page.locator("#state").inner_text() == "Not connected"
    page.click("#connect")
    # the spoken sentence ends, the agent thinks, speaks it back, and listens again
    page.wait_for_function("window.omni.states.includes('speaking')", timeout=20_000)
    page.wait_for_function(
        "window.omni.states.lastIndexOf('listening') > window.omni.states.indexOf('speaking')", timeout=20_000
    )
    states = page.evaluate("window.omni.states")
    assert states.index("thinking") < states.index("speaking")
    user_line = page.locator("#transcript li.user").first.inner_text()
    assert re.search(r"\d\.\d s of speech", user_line), user_line
    assert page.locator("#transcript li.assistant").count() >= 1
    # audio came back to the page, loud enough to be the echoed speech
    assert page.evaluate("window.omni.remotePeak") > 0.05
    assert page.evaluate("window.omni.remoteVoicedBlocks") > 10
    # the figures of the turn are shown
    page.wait_for_function("document.getElementById('m-audio').textContent !== '–'", timeout=5_000)
    assert re.match(r"\d+ ms", page.locator("#m-endpoint").inner_text())
    Path("results").mkdir(exist_ok=True)
    page.screenshot(path="results/page-echo.png", full_page=True)
    page.click("#connect")  # hang up
    page.wait_for_function("document.getElementById('state').dataset.state === 'idle'", timeout=5_000)
