"""Placeholder container process: an HTTP server on every given port of ``--host``.

GET any path → 200 JSON ``{"pod": $HOSTNAME, "ip", "port", "pid", "path"}`` (``--idle``: the same,
used for images the kubelet does not know). Without ports it just sleeps. Stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        addr = self.server.server_address
        host, port = (str(addr[0]), int(addr[1])) if isinstance(addr, tuple) else (str(addr), 0)
        body = json.dumps({"pod": os.environ.get("HOSTNAME", ""), "ip": host, "port": port,
                           "pid": os.getpid(), "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--host", required=True)
    p.add_argument("--ports", default="")
    p.add_argument("--idle", action="store_true")
    args = p.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    for port in filter(None, args.ports.split(",")):
        srv = ThreadingHTTPServer((args.host, int(port)), _Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    print(f"{'idle' if args.idle else 'echo'} on {args.host} ports [{args.ports}] pid {os.getpid()}",
          flush=True)
    stop.wait()
    print("SIGTERM: exiting", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
