"""The egress proxy and its forwarder, as a job inside ``bwrap --unshare-net`` meets them.

The "outside" is an HTTP server on 127.0.0.1 of the test's own network namespace: a job's namespace
has a loopback of its own, so only the proxy reaches it. Each attack is a shell command run where the
job's agent runs, with the proxy variables the job gets.
"""

from __future__ import annotations

import asyncio
import http.server
import shutil
import socket
import threading
import tracemalloc
from pathlib import Path
from typing import Iterator

import pytest

from roost.egress.proxy import JobProxy
from roost.egress.request_head import HEAD_MAX, SecretKey
from roost.sandbox.network import FORWARDER, PROXY_PORT, proxy_env
from roost.rules.egress import Policy

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

PLACEHOLDER = "roost-placeholder-abc"
REAL = "sk-real-secret-123"


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers ``outside <path> key=<the Authorization header>``."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = f"outside {self.path} key={self.headers.get('Authorization', '')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def outside() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture(scope="module")
def other() -> Iterator[int]:
    """A second server: a port the allow-list does not name."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


class Job:
    """A proxy for job ``j1`` and a way to run a shell inside its network walls."""

    def __init__(self, tmp: Path, policy: Policy, keys: tuple[SecretKey, ...] = (), max_connections: int = 64):
        self.sock = tmp / "egress.sock"
        self.refusals: list[tuple[str, str, str]] = []
        self.proxy = JobProxy("j1", policy, lambda *r: self.refusals.append(r), keys, max_connections)

    async def shell(self, script: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        """Run ``sh -c script`` behind the forwarder in a namespace with loopback only."""
        env = {"PATH": "/usr/bin:/bin", **proxy_env(PROXY_PORT), **(env or {})}
        argv = ["bwrap", "--unshare-net", "--die-with-parent", "--dev-bind", "/", "/", "--clearenv",
                *[a for k, v in env.items() for a in ("--setenv", k, v)],
                "python3", "-I", "-S", str(FORWARDER), str(self.sock), str(PROXY_PORT), "--", "sh", "-c", script]
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode or 0, out.decode()


@pytest.fixture
async def job_factory(tmp_path: Path):
    made: list[Job] = []

    async def make(policy: Policy, **kw) -> Job:
        job = Job(tmp_path, policy, **kw)
        await job.proxy.start(job.sock)
        made.append(job)
        return job

    yield make
    for job in made:
        await job.proxy.close()


CURL = "curl -sS --max-time 20"


async def test_an_allowed_host_is_reached_through_the_proxy_and_only_through_it(job_factory, outside):
    job = await job_factory(Policy(chain=((f"localhost:{outside}",),)))
    code, out = await job.shell(f"{CURL} http://localhost:{outside}/hi")
    assert code == 0 and out.startswith("outside /hi"), out
    code, out = await job.shell(f"{CURL} --noproxy '*' http://localhost:{outside}/hi")  # around the proxy
    assert code != 0 and "outside" not in out, out
    assert job.refusals == []


async def test_a_raw_ip_is_refused_unless_listed_and_named_on_the_timeline(job_factory, outside):
    job = await job_factory(Policy(chain=((f"localhost:{outside}",),)))
    code, out = await job.shell(f"{CURL} -f http://127.0.0.1:{outside}/x; {CURL} -f https://127.0.0.1:{outside}/x")
    assert "outside" not in out and code != 0, out
    assert [(r[0], r[1]) for r in job.refusals] == [("j1", f"127.0.0.1:{outside}")]
    listed = await job_factory(Policy(chain=((f"127.0.0.1:{outside}",),)))
    code, out = await listed.shell(f"{CURL} http://127.0.0.1:{outside}/x")
    assert out.startswith("outside /x"), out


async def test_no_dns_from_inside_and_a_direct_connection_finds_nothing(job_factory, outside):
    job = await job_factory(Policy(chain=(("localhost:1",),)))
    code, out = await job.shell(
        f"getent hosts example.com || echo no-dns; {CURL} --noproxy '*' http://127.0.0.1:{outside}/ || echo no-route")
    assert "no-dns" in out and "no-route" in out and "outside" not in out, out


async def test_an_allowed_host_used_as_a_relay_to_another_port_is_refused(job_factory, outside, other):
    job = await job_factory(Policy(chain=((f"localhost:{outside}",),)))
    code, out = await job.shell(f"{CURL} -p http://localhost:{other}/ ; {CURL} http://localhost:{other}/")
    assert "outside" not in out and "403" in out, out
    assert {r[1] for r in job.refusals} == {f"localhost:{other}"}  # named once, however often tried
    assert "CONNECT to" in job.refusals[0][2]


async def test_a_host_pattern_without_a_port_allows_only_the_web_ports(job_factory, outside):
    job = await job_factory(Policy(chain=(("localhost", "*.example.com"),)))
    code, out = await job.shell(f"{CURL} http://localhost:{outside}/")
    assert "outside" not in out and job.refusals[0][1] == f"localhost:{outside}"


async def test_none_and_all(job_factory, outside):
    closed = await job_factory(Policy(mode="none"))
    code, out = await closed.shell(f"{CURL} http://localhost:{outside}/")
    assert "outside" not in out and closed.refusals
    opened = await job_factory(Policy(mode="all"))
    code, out = await opened.shell(f"{CURL} http://localhost:{outside}/")
    assert out.startswith("outside /"), out


async def test_the_real_key_goes_only_to_its_provider(job_factory, outside, other):
    key = SecretKey(PLACEHOLDER, REAL, f"localhost:{outside}")
    job = await job_factory(Policy(chain=((f"localhost:{outside}", f"localhost:{other}"),)), keys=(key,))
    env = {"API_KEY": PLACEHOLDER}
    code, out = await job.shell(f"printenv; {CURL} -H \"Authorization: Bearer $API_KEY\" http://localhost:{outside}/p",
                                env)
    assert REAL not in out.split("outside")[0] and f"outside /p key=Bearer {REAL}" in out, out
    code, out = await job.shell(f"{CURL} -H \"Authorization: Bearer $API_KEY\" http://localhost:{other}/p", env)
    assert out == f"outside /p key=Bearer {PLACEHOLDER}", out
    # through a tunnel the proxy cannot see (or change) the head: the placeholder stays what it is
    code, out = await job.shell(f"{CURL} -p -H \"Authorization: Bearer $API_KEY\" http://localhost:{outside}/p", env)
    assert out == f"outside /p key=Bearer {PLACEHOLDER}", out


async def test_a_head_past_the_bound_is_refused_and_one_at_it_is_read(job_factory, outside):
    job = await job_factory(Policy(chain=((f"localhost:{outside}",),)))
    first = f"GET http://localhost:{outside}/ HTTP/1.1\r\nHost: localhost\r\nX-Pad: ".encode()
    at = first + b"a" * (HEAD_MAX - len(first) - 4) + b"\r\n\r\n"
    assert len(at) == HEAD_MAX
    for head, expect in ((at, b"200"), (at[:-4] + b"a\r\n\r\n", b"400")):
        reader, writer = await asyncio.open_unix_connection(str(job.sock))
        writer.write(head)
        answer = await reader.read()
        assert answer.split(b" ")[1] == expect, answer[:200]
        writer.close()


async def test_connections_past_the_bound_are_refused(job_factory, outside):
    job = await job_factory(Policy(chain=((f"localhost:{outside}",),)), max_connections=2)
    held = [await asyncio.open_unix_connection(str(job.sock)) for _ in range(2)]
    reader, writer = await asyncio.open_unix_connection(str(job.sock))
    assert (await reader.read()).startswith(b"HTTP/1.1 503")
    for r, w in held:
        w.close()


async def test_bytes_are_streamed_not_buffered(job_factory):
    """A tunnel carries 64 MiB one way while the proxy's memory stays put: only CHUNK per direction."""
    tracemalloc.start()
    sink = socket.create_server(("127.0.0.1", 0))
    port = sink.getsockname()[1]
    total = [0]

    def drain() -> None:
        conn, _ = sink.accept()
        while data := conn.recv(1 << 20):
            total[0] += len(data)
        conn.close()

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    job = await job_factory(Policy(chain=((f"localhost:{port}",),)))
    sender = (f"import socket; s = socket.create_connection(('127.0.0.1', {PROXY_PORT})); "
              f"s.sendall(b'CONNECT localhost:{port} HTTP/1.1\\r\\n\\r\\n'); print(s.recv(100)); "
              f"[s.sendall(bytes(1 << 20)) for _ in range(64)]; s.shutdown(socket.SHUT_WR); s.recv(1)")
    code, out = await job.shell(f"python3 -c \"{sender}\"")
    await asyncio.to_thread(thread.join, 30)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert total[0] == 64 * 1024 * 1024, (total, out)
    assert peak < 8 * 1024 * 1024, peak
    sink.close()
