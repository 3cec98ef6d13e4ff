"""The agent's vty client (:mod:`southbound.vty`) against a daemon that speaks FRR's vty shell protocol.

A daemon reads NUL-terminated commands and answers each with its output, three
NUL bytes and the return code. The lab tests (``test_agent_lab.py``) check the
client against real FRR daemons; these check the protocol's edges: answers in
many pieces, a failing command, a daemon that goes away, and the merge of
several daemons' configurations into one tree.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controller.model.errors import FrrError
from southbound.device.frr_apply import FrrReload
from southbound.vty import daemons, vty_run


def serve(path: Path, answer: Callable[[str], tuple[int, bytes] | None]) -> threading.Thread:
    """A one-session daemon on ``path``: ``answer(command)`` is (code, output), or None to hang up."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)

    def loop() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                buf = b""
                while True:
                    chunk = conn.recv(7)  # small reads: commands arrive in pieces too
                    if not chunk:
                        break
                    buf += chunk
                    while b"\0" in buf:
                        cmd, buf = buf.split(b"\0", 1)
                        got = answer(cmd.decode())
                        if got is None:
                            conn.close()
                            break
                        code, out = got
                        for i in range(0, len(out), 1000):  # the answer in many pieces
                            conn.sendall(out[i:i + 1000])
                        conn.sendall(b"\0\0\0" + bytes([code]))
                    else:
                        continue
                    break

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    _servers.append(srv)
    return t


_servers: list[socket.socket] = []


@pytest.fixture
def vty_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "vty"
    d.mkdir()
    yield d
    while _servers:
        _servers.pop().close()


BGPD = """frr version 8.4.4
frr defaults datacenter
!
hostname leaf
! "log file /x/bgpd.log debugging" enabled by "--log" startup option
!
ip prefix-list P seq 5 permit 10.0.0.0/24
!
router bgp 65010
 neighbor 10.1.0.1 remote-as 65100
 !
 address-family ipv4 unicast
  network 10.0.0.0/24
 exit-address-family
exit
!
"""
ZEBRA = """frr version 8.4.4
hostname leaf
!
interface eth1
 ip address 10.1.0.0/31
exit
!
ip prefix-list P seq 5 permit 10.0.0.0/24
!
"""


def test_commands_run_in_order_and_long_answers_arrive_whole(vty_dir: Path) -> None:
    seen: list[str] = []
    big = ("x" * 79 + "\n") * 5000  # 400 kB, far past one read

    def answer(cmd: str) -> tuple[int, bytes]:
        seen.append(cmd)
        return (0, big.encode()) if cmd == "show big" else (1 if cmd == "bad" else 0, f"ran {cmd}\n".encode())

    serve(vty_dir / "bgpd.vty", answer)
    got = vty_run(vty_dir / "bgpd.vty", "show big", "bad", "show one")
    assert seen == ["enable", "show big", "bad", "show one"]
    assert got == [(0, big), (1, "ran bad\n"), (0, "ran show one\n")]


def test_a_daemon_that_hangs_up_or_is_not_there_is_an_frr_error(vty_dir: Path) -> None:
    serve(vty_dir / "zebra.vty", lambda cmd: None if cmd == "show running-config" else (0, b""))
    with pytest.raises(FrrError, match="closed the session"):
        vty_run(vty_dir / "zebra.vty", "show running-config")
    with pytest.raises(FrrError, match="gone.vty"):
        vty_run(vty_dir / "gone.vty", "show running-config")
    with pytest.raises(FrrError, match="one line"):
        vty_run(vty_dir / "zebra.vty", "show\nrunning-config")


def test_the_running_tree_merges_every_daemon_as_vtysh_does(vty_dir: Path, tmp_path: Path) -> None:
    configs = {"bgpd": BGPD, "zebra": ZEBRA}
    for name, text in configs.items():
        serve(vty_dir / f"{name}.vty", lambda cmd, text=text: (0, text.encode() if "running" in cmd else b""))
    (vty_dir / "bgpd.pid").write_text("1")  # not a socket: not a daemon
    assert [p.name for p in daemons(vty_dir)] == ["bgpd.vty", "zebra.vty"]
    tree = FrrReload(vty_dir, tmp_path / "work").running_tree()
    assert set(tree[()]) == {"frr defaults datacenter", "hostname leaf", "ip prefix-list P seq 5 permit 10.0.0.0/24",
                             "router bgp 65010", "interface eth1"}  # comments are not configuration
    assert list(tree[("interface eth1",)]) == ["ip address 10.1.0.0/31"]
    assert list(tree[("router bgp 65010", "address-family ipv4 unicast")]) == ["network 10.0.0.0/24"]


def test_a_daemon_refusing_the_read_is_an_frr_error(vty_dir: Path, tmp_path: Path) -> None:
    serve(vty_dir / "bgpd.vty", lambda cmd: (0, b"") if cmd == "enable" else (1, b"% Unknown command\n"))
    with pytest.raises(FrrError, match="bgpd answered 1"):
        FrrReload(vty_dir, tmp_path / "work").running_tree()
    assert FrrReload(vty_dir, tmp_path / "work").read_sessions() == ()
