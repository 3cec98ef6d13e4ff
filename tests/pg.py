"""A private, throwaway PostgreSQL server for tests.

:func:`postgres_cluster` finds Debian's ``initdb``/``pg_ctl``
(``/usr/lib/postgresql/*/bin``), makes a temp directory owned by the
``postgres`` user, and runs ``initdb`` and ``pg_ctl`` as that user (initdb
refuses root). The server listens only on a unix socket in that directory (no
TCP), and is stopped and removed by the finalizer even when a test fails.
Without root or PostgreSQL the fixture skips with a reason (a failure in CI,
see ``tests/conftest.py``).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["find_pg_bin", "postgres_url"]

DBNAME = "loomtest"


def find_pg_bin() -> Path | None:
    """The newest PostgreSQL server binary directory, or None."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    return Path(candidates[-1]).parent if candidates else None


def _as_postgres(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a fresh database ``loomtest`` on a private server (session-wide)."""
    if os.geteuid() != 0:
        pytest.skip("PostgreSQL tests need root (to run initdb as the postgres user)")
    bindir = find_pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (Debian package postgresql)")
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no 'postgres' user on this machine")
    if shutil.which("runuser") is None:
        pytest.skip("runuser is missing")
    root = Path(tempfile.mkdtemp(prefix="loom-pg-"))
    os.chown(root, pw.pw_uid, pw.pw_gid)
    data, sock = root / "data", root
    started = False
    try:
        _as_postgres(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                     "--no-sync")
        opts = f"-c listen_addresses='' -k {sock} -c fsync=off -c full_page_writes=off"
        _as_postgres(str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "server.log"), "-w",
                     "-t", "60", "start")
        started = True
        _as_postgres(str(bindir / "createdb"), "-h", str(sock), "-U", "postgres", DBNAME)
        yield f"postgresql+psycopg://postgres@/{DBNAME}?host={sock}"
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"could not start PostgreSQL: {exc.cmd[3:]}: {exc.stderr or exc.stdout}")
    finally:
        if started:
            subprocess.run(["runuser", "-u", "postgres", "--", str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast",
                            "-w", "stop"], capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)
