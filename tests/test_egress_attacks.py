"""Attacks on the network walls from a command job's own shell, with a real daemon: the job's
network is the default (``allow`` with only its provider host, the profile's ``OPEN_BASE_URL``), and
the "outside" is an HTTP server on 127.0.0.1 that no list names. Each way out fails and the timeline
names the host; the provider is reached, with the real key put in by the proxy on the way there only."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
from typing import Callable, Iterator

import pytest

from conftest import DaemonHarness
from test_egress_proxy import REAL, Echo, other, outside  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

CURL = "curl -sS --max-time 15"


def shell_profile(provider: int, network: str = "") -> str:
    env = {"OPEN_BASE_URL": f"http://127.0.0.1:{provider}/v1", "OPEN_API_KEY": REAL}
    return (f'[drivers.sh]\nkind = "command"\ncommand = ["sh", "-c", "{{prompt}}"]\nisolation = "sandbox"\n{network}'
            f'env = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())} }}\n')


def notes(daemon: DaemonHarness, job: str) -> list[str]:
    return [e["data"].get("message", "") for e in daemon.timeline(job) if e["kind"] == "note"]


def test_every_way_out_of_a_job_fails_and_shows_on_its_timeline(daemon_factory: Callable[[str], DaemonHarness],
                                                                 outside, other):  # noqa: F811
    daemon = daemon_factory(shell_profile(provider=other))
    script = "; ".join([
        f"{CURL} http://127.0.0.1:{outside}/raw-ip",  # by raw IP, through the proxy
        f"{CURL} http://localhost:{outside}/by-name",  # by a name that resolves to it
        f"{CURL} --noproxy '*' http://127.0.0.1:{outside}/direct || echo direct-failed",  # around the proxy
        "getent hosts example.com || echo no-dns",  # DNS from inside
        f"{CURL} -p http://127.0.0.1:{other}/ ; {CURL} -p http://127.0.0.1:{outside}/relay",  # the provider host,
        # then CONNECT to another port of the same address: a relay
        "printenv | grep -c sk-real || echo no-key-in-env",
        f"{CURL} -H \"Authorization: Bearer $OPEN_API_KEY\" http://127.0.0.1:{other}/v1/models",
    ])
    job = daemon.spawn(script, driver="sh")
    daemon.wait_state(job, "idle", "failed", timeout=60)
    said = "\n".join(daemon.texts(job))
    assert "outside /raw-ip" not in said and "outside /by-name" not in said and "outside /direct" not in said
    assert "outside /relay" not in said
    assert "direct-failed" in said and "no-dns" in said and "no-key-in-env" in said, said
    assert f"outside /v1/models key=Bearer {REAL}" in said, said  # the proxy put the real key in
    refused = notes(daemon, job)
    for target in (f"127.0.0.1:{outside}", f"localhost:{outside}"):
        assert any(f"to {target}: not on the job's network allow-list" in n for n in refused), refused
    assert REAL not in json.dumps(daemon.timeline(job)).replace(f"key=Bearer {REAL}", "")


def test_network_none_reaches_not_even_the_provider(daemon_factory: Callable[[str], DaemonHarness],
                                                    other):  # noqa: F811
    daemon = daemon_factory(shell_profile(provider=other, network='network = "none"\n'))
    job = daemon.spawn(f"{CURL} http://127.0.0.1:{other}/v1 || echo unreachable; printenv HTTP_PROXY || echo no-proxy",
                       driver="sh")
    daemon.wait_state(job, "idle", "failed", timeout=60)
    said = "\n".join(daemon.texts(job))
    assert "unreachable" in said and "no-proxy" in said and "outside" not in said, said


def test_a_child_is_never_more_open_than_its_parent(daemon_factory: Callable[[str], DaemonHarness],
                                                     outside):  # noqa: F811
    """A child of a ``network = "none"`` job, of a profile whose network is ``all``, has none; the same
    profile's root job reaches the outside."""
    daemon = daemon_factory(shell_profile(provider=outside, network='network = "none"\n')
                            + '\n[drivers.open]\nkind = "command"\ncommand = ["sh", "-c", "{prompt}"]\nnetwork = "all"\n')
    parent = daemon.spawn("echo parent", driver="sh")
    daemon.wait_state(parent, "idle")
    reach = f"{CURL} http://127.0.0.1:{outside}/open || echo unreachable"
    child = daemon.spawn(reach, driver="open", parent=parent)
    root = daemon.spawn(reach, driver="open")
    for job in (child, root):
        daemon.wait_state(job, "idle", "failed", timeout=60)
    assert "unreachable" in "\n".join(daemon.texts(child))
    assert "outside /open" in "\n".join(daemon.texts(root))


def test_a_worker_readopted_after_a_restart_reaches_its_provider_again(
        daemon_factory: Callable[[str], DaemonHarness], other):  # noqa: F811
    """The daemon goes (SIGTERM, the worker stays under its shim) and comes back: the job's proxy is
    served again at the same path, with the same placeholder for the key."""
    daemon = daemon_factory(shell_profile(provider=other))
    job = daemon.spawn("echo first", driver="sh")
    pid = daemon.wait_state(job, "idle")["pid"]
    daemon.stop(keep_workers=True)
    daemon.start()
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["worker_up"], what="the worker re-adopted")
    daemon.call("send", job=job, text=f"{CURL} -H \"Authorization: Bearer $OPEN_API_KEY\" http://127.0.0.1:{other}/again")
    daemon.wait_for(lambda: any("outside /again" in t for t in daemon.texts(job)), what="the provider's answer")
    assert f"outside /again key=Bearer {REAL}" in "\n".join(daemon.texts(job))
    assert daemon.show(job)["pid"] == pid, "the same worker, not a new one"


class Held(Echo):
    """Answers as Echo does, once the test lets it: a request the proxy holds open meanwhile."""

    arrived = threading.Event()
    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        Held.arrived.set()
        Held.release.wait(60)
        super().do_GET()


@pytest.fixture
def held() -> Iterator[int]:
    Held.arrived.clear()
    Held.release.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Held)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    Held.release.set()
    server.shutdown()


def test_a_request_in_flight_when_the_daemon_is_killed_gets_its_answer(
        daemon_factory: Callable[[str], DaemonHarness], held: int) -> None:
    """The job's proxy runs under its shim, not in the daemon: a SIGKILL of the daemon mid-request
    cuts nothing, and the re-adopted worker's turn ends with the provider's answer, the real key put in."""
    daemon = daemon_factory(shell_profile(provider=held))
    job = daemon.spawn(f"{CURL} -H \"Authorization: Bearer $OPEN_API_KEY\" http://127.0.0.1:{held}/held", driver="sh")
    assert Held.arrived.wait(30), "the request never reached the provider"
    daemon.kill()
    Held.release.set()
    daemon.start()
    daemon.wait_for(lambda: any("outside /held" in t for t in daemon.texts(job)), what="the provider's answer")
    assert f"outside /held key=Bearer {REAL}" in "\n".join(daemon.texts(job))
