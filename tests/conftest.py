import pytest

from agent.transport.ice import set_host_addresses


@pytest.fixture(autouse=True, scope="session")
def _loopback_only():
    # Every peer in the tests, server and client, offers 127.0.0.1 and nothing else.
    set_host_addresses(["127.0.0.1"])
    yield
