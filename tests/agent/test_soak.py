"""A shortened soak (the long one: python -m benchmarks.soak): resources come back."""

from agent.bench import start_server
from benchmarks.soak import soak


async def test_short_soak_returns_to_baseline():
    proc, http = start_server("echo", "turn", 4)
    try:
        result = await soak(http.replace("http", "ws", 1) + "/ws", proc.pid, sessions=3, seconds=20)
    finally:
        proc.terminate()
        proc.wait(15)
    print(result)
    b, f = result["baseline"], result["final"]
    assert result["lives"] >= 6 and result["turns"] >= 6 and result["failures"] == 0
    assert f["fds"] <= b["fds"] + 2
    # Idle workers of asyncio's default executor stay (name lookups of connections made at the same time use
    # it): 1-3 of them, by how many connected together; a leak would grow with the 14+ sessions, far past this.
    assert f["threads"] <= b["threads"] + 4
    assert f["rss_mb"] < b["rss_mb"] + 40
