"""What an allow rule needs to know of a shell command and a path, so a rule is never wider than what
the person saw (docs/agents.md#approvals): the programs that run another command given as their
arguments (``env``, ``sh -c``, ``timeout``, ``sudo``, an interpreter's ``-c``), git's ways to run
what its subcommand does not say (``-c``, ``--config-env``, an alias), and a path as it will be
reached (``..`` taken out). Pure functions; roost/rules/approvals.py applies them."""

from __future__ import annotations

import posixpath
import re
import shlex

#: Programs that run another program (or shell text) named in their arguments: a rule for their
#: prefix would allow any command, so "approve for this job" proposes only the exact command.
WRAPPERS = frozenset({
    "env", "sudo", "doas", "su", "timeout", "nice", "ionice", "nohup", "xargs", "parallel", "command", "exec",
    "eval", "builtin", "stdbuf", "time", "watch", "strace", "ltrace", "chroot", "setsid", "unshare", "flock",
    "chrt", "taskset", "systemd-run", "runuser", "script", "find", "busybox", "fakeroot", "firejail",
    "sh", "bash", "zsh", "dash", "ksh", "fish", "csh", "tcsh", "python", "python3", "perl", "ruby", "node",
    "deno", "php", "lua", "awk", "gawk", "mawk", "osascript", "pwsh", "npx", "uvx",
})
#: git's own commands: a word after ``git`` that is not one of them may be an alias, which can run
#: anything (``alias.x = !sh …``), so no wildcard rule allows it.
GIT_COMMANDS = frozenset({
    "add", "am", "annotate", "apply", "archive", "bisect", "blame", "branch", "bundle", "cat-file", "checkout",
    "cherry", "cherry-pick", "clean", "clone", "commit", "count-objects", "describe", "diff", "diff-files",
    "diff-index", "diff-tree", "fetch", "for-each-ref", "format-patch", "fsck", "gc", "grep", "help", "init",
    "log", "ls-files", "ls-remote", "ls-tree", "merge", "merge-base", "mv", "name-rev", "notes", "pull", "push",
    "range-diff", "rebase", "reflog", "remote", "reset", "restore", "rev-list", "rev-parse", "revert", "rm",
    "shortlog", "show", "show-branch", "show-ref", "stash", "status", "switch", "tag", "version", "whatchanged",
    "worktree", "config",
})
#: git commands a wildcard covers only when its prefix names them: ``config`` sets what later runs
#: (``core.pager``, ``alias.*``, hooks' paths).
GIT_NAMED_ONLY = frozenset({"config"})
#: Options through which a git command runs a program of the caller's choosing, and the commands
#: that run one given as an argument (``rebase -x``, ``bisect run``, ``submodule foreach``).
GIT_RUNS = frozenset({"--exec", "--upload-pack", "--receive-pack", "--config-env", "--ext-diff",
                      "--open-files-in-pager", "-O", "--extcmd", "--tool", "-x"})
GIT_RUNNERS = frozenset({"rebase", "bisect", "submodule"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def words(command: str) -> list[str] | None:
    """A command's words as the shell splits them (quotes taken out), or None when it cannot be
    split (an open quote)."""
    try:
        return shlex.split(command, comments=False, posix=True)
    except ValueError:
        return None


def wrapped(command: str) -> bool:
    """Whether a command runs another one through its arguments (a wrapper, an interpreter, an
    assignment before it), or cannot be read as words: what only an exact rule may allow."""
    split = words(command)
    if not split:
        return True
    program = posixpath.basename(split[0])
    return program in WRAPPERS or bool(_ASSIGNMENT.match(split[0])) or program.startswith("python")


def git_widened(command: str, prefix: str) -> bool:
    """Whether a git command does more than a wildcard rule with ``prefix`` can have meant: options
    before its subcommand (``-c``, ``--config-env``, ``-C``, ``--git-dir`` …), a subcommand that is
    not git's own (an alias), ``config`` not named in the prefix, or an option that runs a program.
    False for a command that is not git's."""
    split = words(command)
    if not split or posixpath.basename(split[0]) != "git":
        return False
    if len(split) < 2:
        return False
    sub = split[1]
    if sub not in GIT_COMMANDS:
        return True  # a global option before the subcommand, or an alias
    named = (words(prefix) or [])[1:2] == [sub]
    if sub in GIT_NAMED_ONLY | GIT_RUNNERS and not named:
        return True
    return any(w.split("=", 1)[0] in GIT_RUNS or w.startswith("-O") for w in split[2:])


def normal_path(path: str, cwd: str | None = None) -> str:
    """A path as it will be reached: relative to ``cwd`` when it is relative and one is known, its
    ``.`` and ``..`` taken out (``/repo/../home/u/.bashrc`` is ``/home/u/.bashrc``)."""
    if cwd and not path.startswith("/"):
        path = posixpath.join(cwd, path)
    return posixpath.normpath(path) if path else path
