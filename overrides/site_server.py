"""The built site served from 127.0.0.1, and the Chromium that opens it.

One place for what ``make pdf`` (``overrides/print_pdf.py``) and the browser tests share: Debian's
Chromium with the flags that keep it off the network, and a quiet static server for a built site
with the MIME types its pages load (scripts as modules, fonts, SVG, WebAssembly).
"""
from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css",
        ".json": "application/json", ".svg": "image/svg+xml", ".woff2": "font/woff2", ".woff": "font/woff",
        ".ttf": "font/ttf", ".wasm": "application/wasm",
    }

    def log_message(self, format, *args):  # noqa: A002 - the signature is http.server's
        pass


@contextlib.contextmanager
def served(site: Path) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` serving ``site`` until the block ends."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name="site-server", daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
