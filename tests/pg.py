"""A private, throwaway PostgreSQL server for tests.

:func:`postgres_cluster` finds Debian's ``initdb``/``pg_ctl``
(``/usr/lib/postgresql/*/bin``), makes a temp directory owned by the
``postgres`` user, and runs ``initdb`` and ``pg_ctl`` as that user (initdb
refuses root). The server listens only on a unix socket in that directory (no
TCP), and is stopped and removed on exit even when a test fails. The
``postgres_url`` fixture of ``tests/conftest.py`` runs one per session; tests
marked ``postgres`` skip there with :func:`missing`'s reason (a failure in CI).
:func:`private_cluster` hands out the :class:`Cluster` itself, for a test that
stops the server under a running controller and starts it again (an outage).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = ["Cluster", "drop_schema", "find_pg_bin", "fresh_database", "missing", "postgres_cluster",
           "private_cluster"]

DBNAME = "loomtest"


def find_pg_bin() -> Path | None:
    """The newest PostgreSQL server binary directory, or None."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    return Path(candidates[-1]).parent if candidates else None


def missing() -> str | None:
    """Why a private PostgreSQL server cannot run here, or None if it can."""
    if os.geteuid() != 0:
        return "PostgreSQL tests need root (to run initdb as the postgres user)"
    if find_pg_bin() is None:
        return "PostgreSQL is not installed (Debian package postgresql)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no 'postgres' user on this machine"
    if shutil.which("runuser") is None:
        return "runuser is missing"
    return None


def _as_postgres(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True, text=True,
                          timeout=120)


class Cluster:
    """A private server in ``root`` (data directory and unix socket), started and stopped with ``pg_ctl``."""

    def __init__(self, bindir: Path, root: Path):
        self.bindir, self.root = bindir, root
        self.data = root / "data"
        self.url = f"postgresql+psycopg://postgres@/{DBNAME}?host={root}"

    def init(self) -> None:
        _as_postgres(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E",
                     "UTF8", "--no-sync")

    def start(self, settings: str = "") -> None:
        """``settings``: more server options (``-c name=value ...``)."""
        opts = f"-c listen_addresses='' -k {self.root} -c fsync=off -c full_page_writes=off {settings}".strip()
        _as_postgres(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l",
                     str(self.root / "server.log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE`` (fast: sessions are terminated; immediate: no clean shutdown), waiting."""
        subprocess.run(["runuser", "-u", "postgres", "--", str(self.bindir / "pg_ctl"), "-D", str(self.data),
                        "-m", mode, "-w", "stop"], capture_output=True, timeout=120)


@contextmanager
def private_cluster(settings: str = "") -> Iterator[Cluster]:
    """A fresh server with database ``loomtest``, stopped and removed on exit (skips where it cannot run);
    ``settings``: more server options (``-c name=value ...``)."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    bindir = find_pg_bin()
    assert bindir is not None
    pw = pwd.getpwnam("postgres")
    root = Path(tempfile.mkdtemp(prefix="loom-pg-"))
    os.chown(root, pw.pw_uid, pw.pw_gid)
    cluster = Cluster(bindir, root)
    try:
        try:
            cluster.init()
            cluster.start(settings)
            _as_postgres(str(bindir / "createdb"), "-h", str(root), "-U", "postgres", DBNAME)
        except subprocess.CalledProcessError as exc:
            pytest.fail(f"could not start PostgreSQL: {exc.cmd[3:]}: {exc.stderr or exc.stdout}")
        yield cluster
    finally:
        cluster.stop()  # a server that is not running: pg_ctl says so, nothing else
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def postgres_cluster() -> Iterator[str]:
    """URL of a fresh database ``loomtest`` on a private server, stopped and removed on exit."""
    with private_cluster() as cluster:
        yield cluster.url


def drop_schema(db: Any) -> None:
    """Drop every table of Loom's schema and Alembic's version table from ``db`` (a shared server's leftovers)."""
    from sqlalchemy import text

    from controller.store.models import metadata

    with db.engine.begin() as conn:
        metadata.drop_all(conn)
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))


def fresh_database(url: str, name: str) -> str:
    """The URL of an empty database ``name`` on ``url``'s server (dropped first if it exists): for a test
    whose processes must not meet those of another test on the session's database."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    engine = create_engine(make_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return make_url(url).set(database=name).render_as_string(hide_password=False)
