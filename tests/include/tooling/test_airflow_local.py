"""The embedded Airflow's helpers that need no Airflow process."""

from __future__ import annotations

import http.server
import threading
from types import SimpleNamespace

import pytest

from include.ports import free_port
from include.tooling import airflow_local


class _Health(http.server.BaseHTTPRequestHandler):
    #: The paths asked, in order (set by a test).
    asked: list[str] = []

    def do_GET(self) -> None:
        self.asked.append(self.path)
        self.send_response(200 if self.path == "/api/v2/monitor/health" else 404)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def health_server():
    """A stand-in for the API server's health endpoint on 127.0.0.1; yields its port."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_waiting_for_the_local_api_server_ignores_an_http_proxy_of_the_environment(health_server, monkeypatch):
    # A proxy that refuses every connection: a request sent through it never reaches the server.
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    for name in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, dead_proxy)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    running = SimpleNamespace(poll=lambda: None, returncode=None)
    asked: list[str] = []
    _Health.asked = asked
    airflow_local.wait_until_serving(running, health_server, timeout_s=3)
    assert asked == ["/api/v2/monitor/health"], "the server itself answered, not the proxy"
