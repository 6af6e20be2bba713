"""The egress proxy's added time to a request's first byte, beside a direct connection.

One small HTTP server on 127.0.0.1. The same client (a new connection per request, as an agent's
first request to its provider makes; GET, then the first byte of the answer) runs twice: directly,
and inside ``bwrap --unshare-net`` behind the job's forwarder and the daemon's proxy (the proxy in
this process's event loop, as in the daemon), with the proxy variables a job gets. Each run: N
requests after a few to warm up. Prints p50 and p99 of both and their difference.

    python bench/egress.py [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import pct  # noqa: E402
from roost.daemon.egress.proxy import JobProxy  # noqa: E402
from roost.daemon.egress.sandbox_net import PROXY_PORT, forwarder_argv, unshared  # noqa: E402
from roost.rules.egress import Policy  # noqa: E402

#: The client: a new connection per request; seconds from connect to the answer's first byte.
CLIENT = r"""
import json, socket, sys, time
host, port, path, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
out = []
for i in range(n + 20):
    t = time.perf_counter()
    s = socket.create_connection((host, port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    s.recv(1)
    out.append(time.perf_counter() - t)
    while s.recv(65536):
        pass
    s.close()
print(json.dumps(out[20:]))
"""


class Small(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


async def measure(requests: int) -> dict[str, list[float]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Small)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    client = [sys.executable, "-c", CLIENT]
    direct = await asyncio.to_thread(subprocess.run, [*client, "127.0.0.1", str(port), "/", str(requests)],
                                     capture_output=True, text=True, check=True)
    with tempfile.TemporaryDirectory(prefix="roost-egress-") as tmp:
        sock = Path(tmp) / "egress.sock"
        proxy = JobProxy("bench", Policy(chain=((f"127.0.0.1:{port}",),)), lambda *a: None)
        await proxy.start(sock)
        inside = unshared(forwarder_argv(sys.executable, [*client, "127.0.0.1", str(PROXY_PORT),
                                                           f"http://127.0.0.1:{port}/", str(requests)], sock))
        assert inside is not None, "bubblewrap is not installed"
        proxied = await asyncio.to_thread(subprocess.run, inside, capture_output=True, text=True, check=True)
        await proxy.close()
    server.shutdown()
    return {"direct": json.loads(direct.stdout), "proxy": json.loads(proxied.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    got = asyncio.run(measure(parser.parse_args().requests))
    for p in (50, 99):
        d, x = pct(got["direct"], p) * 1000, pct(got["proxy"], p) * 1000
        print(f"first byte p{p}: direct {d:.2f} ms, through the proxy {x:.2f} ms, added {x - d:.2f} ms")


if __name__ == "__main__":
    main()
