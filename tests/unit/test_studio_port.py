"""`memory-agent studio` prints the port the server really has, and the docs send readers to what it prints."""

from __future__ import annotations

import re
import socket
import sys
from pathlib import Path

from app.studio import launcher

DOCS = Path(__file__).resolve().parents[2] / "docs"

# A stand-in for `langgraph dev`: answers /ok on the port it is given, then exits.
FAKE_SERVER = r"""
import http.server, sys
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Ok)
server.handle_request()
"""


def test_when_port_2024_is_taken_the_printed_urls_and_sdk_line_use_the_port_it_moved_to(monkeypatch, capsys):
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        holder.bind(("127.0.0.1", launcher.DEFAULT_PORT))
        holder.listen()
    except OSError:
        pass  # something else holds it already: taken all the same
    try:
        monkeypatch.setattr(
            launcher, "server_command", lambda host, port, **_: [sys.executable, "-c", FAKE_SERVER, str(port)]
        )
        assert launcher.main(["--host", "127.0.0.1"]) == 0
    finally:
        holder.close()
    printed = capsys.readouterr().out
    (api,) = re.findall(r"^  API:\s+(http://\S+)", printed, re.M)
    port = int(api.rsplit(":", 1)[1])
    assert port != launcher.DEFAULT_PORT
    assert f'get_client(url="http://127.0.0.1:{port}")' in printed
    assert f"baseUrl=http://127.0.0.1:{port}" in printed
    assert ":2024" not in printed.replace(f"port {launcher.DEFAULT_PORT} was taken", "")


def test_the_docs_sdk_example_uses_the_printed_url_not_a_fixed_port():
    api = (DOCS / "api.md").read_text()
    python = "\n".join(re.findall(r"```python\n(.*?)```", api, re.S))
    examples = re.findall(r"get_client\(url=([^,)]+)", python)
    assert examples and not any("2024" in e for e in examples)
    assert "the `API:` line" in api


def test_a_port_given_with_port_is_no_move_from_2024():
    """`studio --port 2931` printed "(port 2024 was taken)"."""
    assert "was taken" not in launcher.ready_text("127.0.0.1", 2931, asked=2931)
    assert "(port 2024 was taken)" in launcher.ready_text("127.0.0.1", 40123)
    assert "was taken" not in launcher.ready_text("127.0.0.1", launcher.DEFAULT_PORT)

