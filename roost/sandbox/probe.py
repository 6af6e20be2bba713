"""What this machine can build walls with, found once when the daemon starts: bubblewrap present and
able to make the namespaces a job needs, and a pids cgroup roost may make groups in (for a per-job
process limit). ``Support`` says it in plain words for `roost daemon status`."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: Where the cgroup v1 pids controller is mounted on a hybrid layout, and roost's group under it.
PIDS_ROOT = Path("/sys/fs/cgroup/pids")
PROBE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Support:
    #: Whether jobs can be sandboxed here; when not, ``reason`` says why in plain words.
    ok: bool
    reason: str
    bwrap: str = ""
    prlimit: str = ""
    #: roost's own pids cgroup (each job a group under it, with pids.max), or None: rlimits only.
    pids: Path | None = None

    def words(self) -> str:
        """One line for `roost daemon status` and `roost doctor`."""
        if not self.ok:
            return f"jobs are NOT sandboxed: {self.reason} (a profile with isolation = \"sandbox!\" is refused)"
        limit = "a pids cgroup per job" if self.pids else "rlimits (no cgroup roost may use)"
        return f"jobs are sandboxed with bubblewrap ({self.bwrap}); process limits by {limit}"

    def to_wire(self) -> dict[str, object]:
        return {"ok": self.ok, "reason": self.reason, "words": self.words()}


def probe(bwrap: str) -> Support:
    """Whether ``bwrap`` (a name on PATH or a path) runs a command in new pid, ipc, uts namespaces here."""
    found = shutil.which(os.path.expanduser(bwrap))
    if found is None:
        return Support(False, f"bubblewrap ({bwrap}) is not installed (Debian/Ubuntu: apt install bubblewrap)")
    try:
        done = subprocess.run([found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                               "--unshare-ipc", "--unshare-uts", "--cap-drop", "ALL", "--die-with-parent", "--", "true"],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Support(False, f"bubblewrap ({found}) could not be run: {exc}")
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return Support(False, f"bubblewrap ({found}) cannot make namespaces here (user namespaces off?): {why[0]}")
    return Support(True, "", found, shutil.which("prlimit") or "", _pids_group())


def _pids_group() -> Path | None:
    """roost's group in the pids cgroup, made when roost may (root, or a delegated tree); else None."""
    group = PIDS_ROOT / "roost"
    try:
        group.mkdir(exist_ok=True)
        return group if os.access(group / "cgroup.procs", os.W_OK) else None
    except OSError:
        return None
