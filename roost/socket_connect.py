"""Reaching the daemon's socket, and what each way of failing means.

Only ``unreachable`` (no socket file, or nobody listening on it) means no daemon is there, so
that starting one may help. A daemon whose queue of new connections is full (it is out of file
descriptors, or wedged) is ``busy``; this process running out of descriptors is ``local``; both
are said as what they are, so no client ever starts a second daemon beside a live one.

Before anything is sent, the client checks who answers: the process at the other end of the
socket must be this user's (or root's). Anyone else holding the socket path (a directory above
it was writable, say) would read the person's next prompt, so such a peer is refused
(``peer``) and told nothing.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from pathlib import Path

from roost.protocol import ErrorCode

#: The one code that means "no daemon is there".
UNREACHABLE = "unreachable"
#: This process ran out of something (descriptors): the daemon was not asked.
LOCAL = "local"
#: Seconds a connect keeps trying while the daemon's queue of new connections is full (a burst of
#: clients drains in milliseconds; a daemon that stays full is out of descriptors or wedged).
CONNECT_WAIT = 3.0
#: The process answering on the socket is not this user's (nor root's): nothing was sent to it.
FOREIGN_PEER = "peer"
#: Nobody listens on the socket path: no file there, or one a dead daemon left.
_NOBODY = frozenset({errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR})


class ClientError(Exception):
    """The daemon refused a request, or could not be reached; ``code`` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def connect_socket(socket_path: Path, timeout: float) -> socket.socket:
    """A connected non-blocking socket; a full queue is retried for up to CONNECT_WAIT seconds
    (or ``timeout`` if shorter)."""
    sock = _new_socket()
    deadline = time.monotonic() + min(timeout, CONNECT_WAIT)
    pause = 0.005
    while not _try_connect(sock, socket_path):
        if time.monotonic() > deadline:
            raise _backlog_full(sock, socket_path)
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
    return sock


async def connect_socket_async(socket_path: Path, timeout: float) -> socket.socket:
    """``connect_socket`` for an event loop. The socket is connected here, not by asyncio, which
    takes a full queue (EAGAIN) for a connect in progress and hands back a socket that was never
    connected."""
    import asyncio  # here: the blocking CLI never pays for loading asyncio

    sock = _new_socket()
    deadline = time.monotonic() + min(timeout, CONNECT_WAIT)
    while not _try_connect(sock, socket_path):
        if time.monotonic() > deadline:
            raise _backlog_full(sock, socket_path)
        await asyncio.sleep(0.05)
    return sock


def _new_socket() -> socket.socket:
    """A non-blocking unix socket; running out of descriptors here is this process's problem."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            raise ClientError(LOCAL, f"cannot open a connection to the daemon: this process is out of file "
                                     f"descriptors ({exc.strerror}); the daemon was not asked") from None
        raise ClientError(LOCAL, f"cannot open a connection to the daemon: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a unix socket (``SO_PEERCRED``: Linux, where
    roost runs; elsewhere the attribute is missing, AttributeError, and the caller refuses the
    peer). Both sides use it: the daemon for who connected, a client for who answers."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid, uid


def check_peer(sock: socket.socket, socket_path: Path) -> None:
    """Refuse (closing the socket, nothing sent) a peer that is neither this user nor root."""
    try:
        _pid, uid = peer_credentials(sock)
    except (OSError, AttributeError) as exc:
        sock.close()
        raise ClientError(FOREIGN_PEER, f"cannot tell who answers on {socket_path} ({exc}); nothing was "
                                        f"sent") from None
    if uid not in (os.getuid(), 0):
        sock.close()
        raise ClientError(FOREIGN_PEER, f"the process answering on {socket_path} runs as uid {uid}, not as you "
                                        f"(uid {os.getuid()}): it is not your daemon, so nothing was sent to it. "
                                        f"Someone else may hold the socket's directory; check who owns "
                                        f"{socket_path.parent} and the directories above it")


def _try_connect(sock: socket.socket, socket_path: Path) -> bool:
    """Connect (a unix connect on Linux is done at once) and check the peer; False when the
    daemon's queue of new connections is full, ClientError for anything else, ``unreachable``
    only when nobody listens."""
    try:
        sock.connect(str(socket_path))
        check_peer(sock, socket_path)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        sock.close()
        code = UNREACHABLE if exc.errno in _NOBODY else "connect"
        raise ClientError(code, f"cannot reach the daemon at {socket_path}: {exc.strerror or exc}") from None


def _backlog_full(sock: socket.socket, socket_path: Path) -> ClientError:
    sock.close()
    return ClientError(ErrorCode.BUSY, f"the daemon at {socket_path} is not taking new connections (its queue "
                                       f"stayed full for {CONNECT_WAIT:.0f}s: it may be out of file descriptors; "
                                       f"its log says); try again later")
