"""A real OpenSSH server for the hosts tests: on 127.0.0.1, a free port, a host key and a user key
made for the test, so the "remote" host is this machine reached through it."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

#: Where Debian's sshd lives; it refuses to start from a relative path.
SSHD_PATHS = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")


#: How often start picks another port when the one it picked was taken before sshd bound it.
PORT_TRIES = 5


class PortTaken(Exception):
    """sshd could not bind its port: something took it between ``free_port`` and sshd's bind."""


def find_sshd() -> str | None:
    for path in (shutil.which("sshd"), *SSHD_PATHS):
        if path and os.access(path, os.X_OK):
            return path
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@dataclass
class Sshd:
    """One test's sshd: start it, stop it, and what a client needs to reach it."""

    binary: str
    root: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def identity(self) -> Path:
        return self.root / "user_key"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    def prepare(self) -> None:
        """Keys and config; the dirs are 0700, but the tmp dir's parents (/tmp is 1777) fail sshd's
        StrictModes walk up to /, so StrictModes is off for this private test server."""
        self.root.chmod(0o700)
        keygen(self.root / "host_key")
        keygen(self.identity)
        (self.root / "authorized_keys").write_bytes((self.root / "user_key.pub").read_bytes())
        self._write_config()
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege separation directory

    def _write_config(self) -> None:
        """sshd_config and known_hosts for ``self.port`` (rewritten when start moves to another port)."""
        host_pub = (self.root / "host_key.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        (self.root / "sshd_config").write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.root / 'host_key'}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}", f"PidFile {self.root / 'sshd.pid'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "StrictModes no", "LogLevel ERROR", "MaxSessions 100", "MaxStartups 100",
            # The remote commands run through the user's login shell. A shell startup that waits on
            # a lock (pyenv's rehash waits 60 s for one left by a killed shell) must not hang them.
            "SetEnv PYENV_REHASH_TIMEOUT=0",
        ]) + "\n")

    def start(self, timeout: float = 10.0) -> None:
        """Start sshd and wait until it accepts connections; RuntimeError with its stderr if not.
        The port was free when picked, but tests run side by side (pytest-xdist) and anything on the
        machine may take it before sshd binds it: then it starts again on another free port."""
        for _ in range(PORT_TRIES):
            try:
                return self._start_once(timeout)
            except PortTaken:
                self.port = free_port()
                self._write_config()
        raise RuntimeError(f"sshd found its port taken {PORT_TRIES} times")

    def _start_once(self, timeout: float) -> None:
        log = self.root / "sshd.log"
        with open(log, "ab") as err:
            seen = err.tell()
            self.proc = subprocess.Popen([self.binary, "-D", "-e", "-f", str(self.root / "sshd_config")],
                                         stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                said = log.read_bytes()[seen:].decode(errors="replace")
                if "Address already in use" in said:
                    raise PortTaken(self.port)
                raise RuntimeError(f"sshd exited: {said[-500:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not listen in time")

    def stop(self) -> None:
        """Stop the listener; sessions it forked go with it (tests that want a dead host want that)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)

    def host_table(self, name: str, remote_dir: Path, known_hosts: Path | None = None) -> str:
        """The ``[hosts.NAME]`` TOML for reaching this server."""
        options = ["-o", f"UserKnownHostsFile={known_hosts or self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null"]
        return (f'[hosts.{name}]\nssh = "{getpass.getuser()}@127.0.0.1"\nport = {self.port}\n'
                f'identity = "{self.identity}"\noptions = {options!r}\ndir = "{remote_dir}"\n').replace("'", '"')
