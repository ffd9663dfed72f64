"""Faults between S3A and the suite's S3 server (benchmarks/s3_server.py), for
tests/test_storage_faults.py. Real faults on real connections, never a mocked client:

- `Toxiproxy`: Shopify's TCP proxy (deploy/s3/toxiproxy.sh builds it from its pinned Go module
  into the cache outside the clone), whose `reset_peer` toxic resets every connection through
  it (TCP RST) while it is on;
- `HttpFaultProxy`: an HTTP proxy that forwards every request to the server, but answers each
  with S3's `503 SlowDown` while its window is open (Toxiproxy works on TCP and cannot answer
  in HTTP), or holds the requests to some paths for a while before it forwards them, whether
  their client still waits or not (a store that takes a commit's PUT and answers it late);
- the server itself stalled (`S3Server.pause`: SIGSTOP, then SIGCONT), or killed and started
  again on the same data (`S3Server.kill`, `restart`).
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "deploy" / "s3" / "toxiproxy.sh"


def toxiproxy_binary() -> Path:
    """Toxiproxy's server, built first when this machine has none (about a minute, once)."""
    path = subprocess.run(
        ["bash", str(BUILD), "build"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Toxiproxy:
    """A Toxiproxy server on a free loopback port, with one proxy per upstream (`proxy`)."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        self._log = open(log, "ab")  # noqa: SIM115 - closed by stop
        self.process = subprocess.Popen(
            [str(toxiproxy_binary()), "-host", "127.0.0.1", "-port", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                self._call("GET", "/version")
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"Toxiproxy did not start: {log}") from None
                time.sleep(0.1)

    def _call(self, method: str, path: str, body: object | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=data, method=method
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read()
        return json.loads(text) if text.strip() else None

    def proxy(self, name: str, upstream: str) -> str:
        """A proxy to the `upstream` endpoint (`http://host:port`) on a free port: its
        endpoint."""
        where = urlsplit(upstream)
        port = free_port()
        self._call(
            "POST",
            "/proxies",
            {
                "name": name,
                "listen": f"127.0.0.1:{port}",
                "upstream": f"{where.hostname}:{where.port}",
                "enabled": True,
            },
        )
        return f"http://127.0.0.1:{port}"

    def reset_connections(self, name: str) -> None:
        """From now on every connection through proxy `name` is reset (TCP RST) as it sends:
        new ones and those open, until `heal`."""
        self._call(
            "POST",
            f"/proxies/{name}/toxics",
            {"name": "reset", "type": "reset_peer", "stream": "upstream", "toxicity": 1.0,
             "attributes": {"timeout": 0}},
        )  # fmt: skip

    def heal(self, name: str) -> None:
        self._call("DELETE", f"/proxies/{name}/toxics/reset")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code><Message>Please '
    b"reduce your request rate.</Message><RequestId>faults</RequestId></Error>"
)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection"}


class HttpFaultProxy:
    """An HTTP/1.1 proxy to `upstream` on a free loopback port: every request is forwarded
    (its Host header kept, so its signature holds), but while `slow_down`'s window is open,
    answered `503 SlowDown` as S3 throttles (`answered` counts them), and while `hold`'s is,
    a request to a path it names waits until the window closes, then goes to the server
    (`held` lists them, `landed` is set once the last has been answered there)."""

    def __init__(self, upstream: str) -> None:
        where = urlsplit(upstream)
        self._upstream = (str(where.hostname), int(where.port or 80))
        self._until = 0.0
        self.answered = 0
        self._hold: tuple[str, re.Pattern[str], float] | None = None
        self.held: list[str] = []  # every request held, in order
        self._pending = 0
        self.landed = threading.Event()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self._body()
                held = proxy.holding(self.command, self.path)
                if held is not None:
                    time.sleep(max(0.0, held - time.monotonic()))
                    try:
                        self._pass(body)
                    except OSError:  # its client gave up on it long ago
                        pass
                    finally:
                        proxy.forwarded(self.path)
                    return
                if proxy.throttling():
                    with proxy._lock:
                        proxy.answered += 1
                    payload = b"" if self.command == "HEAD" else SLOW_DOWN
                    self.send_response(503, "Slow Down")
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOW_DOWN)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                try:
                    self._pass(body)
                except OSError:  # the server is not there: its client sees the connection close
                    self.close_connection = True

            def _pass(self, body: bytes) -> None:
                upstream = http.client.HTTPConnection(*proxy._upstream, timeout=120)
                try:
                    headers = {
                        k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP
                    }
                    if body or "Content-Length" in self.headers:
                        headers["Content-Length"] = str(len(body))
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    answer = upstream.getresponse()
                    data = answer.read()
                    self.send_response(answer.status, answer.reason)
                    for key, value in answer.getheaders():
                        if key.lower() in _HOP_BY_HOP:
                            continue
                        if key.lower() == "content-length" and self.command != "HEAD":
                            continue
                        self.send_header(key, value)
                    if self.command != "HEAD":
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    upstream.close()

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline().strip():
                                pass
                            return b"".join(chunks)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def slow_down(self, seconds: float) -> None:
        """Answer every request `503 SlowDown` for the next `seconds`."""
        self._until = time.monotonic() + seconds

    def throttling(self) -> bool:
        return time.monotonic() < self._until

    def hold(self, method: str, path: str, seconds: float) -> None:
        """For the next `seconds`, hold every `method` request whose path matches the regular
        expression `path` until they have passed, then forward it."""
        self.landed.clear()
        self._hold = (method, re.compile(path), time.monotonic() + seconds)

    def holding(self, method: str, path: str) -> float | None:
        """When a request held by `hold` goes on (None: it is not held)."""
        rule = self._hold
        if rule is None or method != rule[0] or not rule[1].search(path):
            return None
        if time.monotonic() >= rule[2]:
            return None
        with self._lock:
            self.held.append(path)
            self._pending += 1
        return rule[2]

    def forwarded(self, path: str) -> None:
        with self._lock:
            self._pending -= 1
            if not self._pending:
                self.landed.set()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
