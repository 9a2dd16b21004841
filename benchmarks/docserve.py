"""A doc directory served on 127.0.0.1 by a threaded server in the benchmark's own process: every request
counted by path, and (for a mirror) a footer of its own added to every HTML page, before ``</body>``."""

from __future__ import annotations

import mimetypes
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["DocServer", "served_bytes", "serving"]


def served_bytes(file: Path, footer: bytes) -> bytes:
    """What the server answers for ``file``: its bytes, an HTML page's with ``footer`` before its last
    ``</body>`` (or at its end)."""
    body = file.read_bytes()
    if not footer or file.suffix.lower() not in (".html", ".htm"):
        return body
    at = body.lower().rfind(b"</body>")
    return body + footer if at < 0 else body[:at] + footer + body[at:]


class DocServer(ThreadingHTTPServer):
    """Files of ``root``, each request counted in :attr:`counts`."""

    def __init__(self, root: Path, footer: bytes = b"") -> None:
        self.root = root.resolve()
        self.footer = footer
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: DocServer

    def do_GET(self) -> None:
        path = unquote(urlsplit(self.path).path)
        with self.server.lock:
            self.server.counts[path] += 1
        file = (self.server.root / path.lstrip("/")).resolve()
        if not file.is_relative_to(self.server.root) or not file.is_file():
            self.send_error(404)
            return
        body = served_bytes(file, self.server.footer)
        self.send_response(200)
        self.send_header("Content-Type", mimetypes.guess_type(file.name)[0] or "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # the base class's names
        """Quiet: the counts are the log."""


@contextmanager
def serving(root: Path, footer: bytes = b"") -> Iterator[DocServer]:
    """A :class:`DocServer` of ``root`` running in a thread until the block ends."""
    server = DocServer(root, footer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
