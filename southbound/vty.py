"""Reading an FRR daemon over its vty socket, as ``vtysh`` does, without starting ``vtysh``.

Every FRR daemon listens on ``DIR/<daemon>.vty`` (a Unix stream socket) for
the shell: the client writes a command terminated by a NUL byte; the daemon
answers the command's output followed by three NUL bytes and the command's
return code (0 is success). ``vtysh`` is a client of every daemon at once: it
sends each command to the daemons that implement it, and merges their
``show running-config`` into one text. Starting it costs about 30 ms of CPU
(it builds the whole command tree), which on a 2-core switch agent is most of
what reading a configuration costs; this module is the cheap path for reads:
one socket per daemon, about a millisecond per command.

The agent reads its switch's configuration and sessions this way, and ``loom lab`` its nodes' BGP
sessions while a lab converges. Only reads go this way. Configuration still goes through ``vtysh``, which
knows which daemon implements which command (``ip prefix-list`` goes to
several, ``ip route`` to ``staticd``); the read-back after it is what tells
whether the daemons took it.
"""

from __future__ import annotations

import socket
from pathlib import Path

from controller.model.errors import FrrError

__all__ = ["VTY_OK", "daemons", "vty_run"]

#: the return code of a command that succeeded
VTY_OK = 0
_END = b"\0\0\0"


def daemons(vty_dir: Path) -> list[Path]:
    """The vty sockets of the daemons running under ``vty_dir``, sorted by name."""
    try:
        return sorted(p for p in vty_dir.iterdir() if p.suffix == ".vty" and p.is_socket())
    except OSError:
        return []


def vty_run(sock_path: Path, *commands: str, timeout: float = 30.0) -> list[tuple[int, str]]:
    """Run ``commands`` in order on one daemon (after ``enable``); per command its return code and output.

    :class:`FrrError` when the daemon cannot be reached or closes the session before answering."""
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:
        raise FrrError(f"cannot open a socket to {sock_path.name}: {exc}") from exc
    try:
        s.settimeout(timeout)
        s.connect(str(sock_path))
        answers: list[tuple[int, str]] = []
        for cmd in ("enable", *commands):
            if "\0" in cmd or "\n" in cmd:
                raise FrrError(f"a vty command is one line: {cmd!r}")
            s.sendall(cmd.encode() + b"\0")
            buf = bytearray()
            while not (len(buf) >= 4 and buf[-4:-1] == _END):
                chunk = s.recv(1 << 16)
                if not chunk:
                    raise FrrError(f"{sock_path.name} closed the session during {cmd!r}")
                buf += chunk
            answers.append((buf[-1], buf[:-4].decode(errors="replace")))
        return answers[1:]
    except OSError as exc:  # refused, reset, timed out
        raise FrrError(f"{sock_path.name}: {exc}") from exc
    finally:
        s.close()
