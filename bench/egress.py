"""The egress proxy's added time to a request's first byte, beside a direct connection.

One small HTTP server on 127.0.0.1. The same client (a new connection per request, as an agent's
first request to its provider makes; GET, then the first byte of the answer) runs twice: directly,
and inside ``bwrap --unshare-net`` behind the job's forwarder and its egress proxy (the program a
job's shim runs, roost/programs/egress_proxy.py, started as a job's is). Each run: N
requests after a few to warm up. Prints p50 and p99 of both and their difference.

    python bench/egress.py [--requests 300]
"""

from __future__ import annotations

import argparse
import http.server
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import pct  # noqa: E402
from roost.sandbox.network import INSIDE_SOCKET, PROXY_PORT, forwarder_argv, proxy_argv  # noqa: E402

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


def measure(requests: int) -> dict[str, list[float]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Small)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    client = [sys.executable, "-c", CLIENT]
    direct = subprocess.run([*client, "127.0.0.1", str(port), "/", str(requests)], capture_output=True, text=True,
                            check=True)
    bwrap = shutil.which("bwrap")
    assert bwrap is not None, "bubblewrap is not installed"
    with tempfile.TemporaryDirectory(prefix="roost-egress-") as tmp:
        sock, spec = Path(tmp) / "egress.sock", Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"job": "bench", "socket": str(sock), "mode": "allow",
                                    "chain": [[f"127.0.0.1:{port}"]], "provider": [], "keys": [], "mark": "x "}))
        inside = [bwrap, "--dev-bind", "/", "/", "--bind", str(sock), INSIDE_SOCKET, "--unshare-net",
                  "--die-with-parent", "--", *forwarder_argv(sys.executable, [*client, "127.0.0.1", str(PROXY_PORT),
                                                                            f"http://127.0.0.1:{port}/", str(requests)],
                                                             INSIDE_SOCKET)]
        proxied = subprocess.run(proxy_argv(str(spec), inside), capture_output=True, text=True, check=True,
                                 cwd=str(ROOT))
    server.shutdown()
    return {"direct": json.loads(direct.stdout), "proxy": json.loads(proxied.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    got = measure(parser.parse_args().requests)
    for p in (50, 99):
        d, x = pct(got["direct"], p) * 1000, pct(got["proxy"], p) * 1000
        print(f"first byte p{p}: direct {d:.2f} ms, through the proxy {x:.2f} ms, added {x - d:.2f} ms")


if __name__ == "__main__":
    main()
