"""A real git server over HTTP for tests: `git http-backend` behind Basic authentication.

It serves the bare repositories under ``root`` at http://127.0.0.1:PORT/NAME, answers 401
until a request carries the expected user and token (so git must ask GIT_ASKPASS for
them), and can answer 503 to the first N requests to exercise retries.
"""
from __future__ import annotations

import base64
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit


class GitHttpServer:
    def __init__(self, root: Path, user: str, token: str):
        self.root = Path(root)
        self.expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()
        self.fail_next = 0             # answer 503 to this many requests first
        self.requests = 0
        self.unavailable_answers = 0
        self.authorized = 0            # requests that carried the right credentials
        self.rejected_credentials = 0  # requests that carried wrong ones
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                server._handle(self)

            def do_POST(self):
                server._handle(self)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "GitHttpServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        body = _read_body(request)
        with self.lock:
            self.requests += 1
            fail = self.fail_next > 0
            if fail:
                self.fail_next -= 1
                self.unavailable_answers += 1
        if fail:
            return _reply(request, 503, {"Content-Type": "text/plain"}, b"try again later\n")
        auth = request.headers.get("Authorization")
        if auth != self.expected:
            if auth:
                with self.lock:
                    self.rejected_credentials += 1
            return _reply(request, 401, {"WWW-Authenticate": 'Basic realm="git"'}, b"")
        with self.lock:
            self.authorized += 1
        url = urlsplit(request.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": request.command, "PATH_INFO": url.path, "QUERY_STRING": url.query,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": "tester", "REMOTE_ADDR": "127.0.0.1",
            "GIT_PROTOCOL": request.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": request.headers.get("Content-Encoding", ""),
        }
        done = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers[key] = value.strip()
        _reply(request, status, headers, payload)


def _read_body(request: BaseHTTPRequestHandler) -> bytes:
    if request.headers.get("Transfer-Encoding", "").lower() == "chunked":
        data = b""
        while True:
            size = int(request.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                request.rfile.readline()
                return data
            data += request.rfile.read(size)
            request.rfile.readline()
    length = int(request.headers.get("Content-Length") or 0)
    return request.rfile.read(length) if length else b""


def _reply(request: BaseHTTPRequestHandler, status: int, headers: dict, body: bytes) -> None:
    request.send_response(status)
    for key, value in headers.items():
        if key.lower() != "content-length":
            request.send_header(key, value)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)
