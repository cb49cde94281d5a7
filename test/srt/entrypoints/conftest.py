"""Servers shared across modules, so that they pay for one start-up each: one with the default
flags (the basic server, response-limit and binary-embedding tests), and one hardened (API key,
small limits, CORS, JSON request logs) for the security, observability and fuzz tests."""

from __future__ import annotations

import pytest

API_KEY = "test-key-1234"
HARDENED_ARGS = (
    "--api-key",
    API_KEY,
    "--max-payload-bytes",
    "65536",
    "--max-client-batch-size",
    "8",
    "--cors-allow-origin",
    "https://app.example",
    "--log-requests",
    "--log-format",
    "json",
    "--request-timeout",
    "1.5",
    "--max-batch-size",
    "2",
)


@pytest.fixture(scope="session")
def default_server():
    """`sglang serve` with no flags but the model's. Tests that stop or kill a server start their own."""
    from test.helpers.server import ServerProcess

    with ServerProcess() as s:
        yield s


@pytest.fixture(scope="session")
def hardened_server():
    from test.helpers.server import ServerProcess

    with ServerProcess(*HARDENED_ARGS) as s:
        s.api_key = API_KEY
        s.headers = {"Authorization": f"Bearer {API_KEY}"}
        yield s
