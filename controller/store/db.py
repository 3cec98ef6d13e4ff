"""Database plumbing: engines, sessions, write transactions and migrations.

:class:`Database` wraps one SQLAlchemy engine for a URL: SQLite (the default,
``sqlite:///./loom.db``; WAL journal, foreign keys on, ``BEGIN IMMEDIATE`` for
write transactions so writers queue instead of failing half way) or PostgreSQL
(``postgresql+psycopg://...``). Alembic migrations live in this package
(``controller/store/migrations``) and run programmatically: :meth:`Database.migrate`
brings the schema to head, :meth:`Database.schema_is_current` tells ``/readyz``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from controller.store.content import HeadCache, SnapshotCache, StoreOptions, install_cache_hooks

__all__ = ["DEFAULT_URL", "Database", "normalize_url", "write_transaction"]

DEFAULT_URL = "sqlite:///./loom.db"
MIGRATIONS = Path(__file__).parent / "migrations"
_WRITE = "loom_write"


def normalize_url(url: str) -> str:
    """Accept a plain file path for SQLite and ``postgresql://`` for psycopg 3."""
    if "://" not in url:
        return f"sqlite:///{url}"
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _sqlite_setup(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA busy_timeout=10000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = "IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")


class Database:
    """One store: an engine, a session factory and the migration scripts."""

    def __init__(self, url: str = DEFAULT_URL, *, echo: bool = False, options: StoreOptions | None = None):
        self.url = normalize_url(url)
        parsed = make_url(self.url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        kwargs: dict[str, Any] = {"echo": echo, "future": True}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
        else:
            kwargs["pool_pre_ping"] = True
        self.engine = create_engine(self.url, **kwargs)
        if self.is_sqlite:
            _sqlite_setup(self.engine)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        #: the revisions' snapshots this process built (controller.store.content), shared by its sessions
        self.snapshots = SnapshotCache(options)
        #: the head revision as last seen, for reads that may be a moment old (controller.service.cached_head)
        self.heads = HeadCache()
        install_cache_hooks(self.sessions, self.snapshots, self.heads)

    @property
    def display_url(self) -> str:
        """The URL with any password hidden, for messages."""
        return make_url(self.url).render_as_string(hide_password=True)

    def __repr__(self) -> str:
        return f"Database({self.display_url!r})"

    def session(self) -> Session:
        return self.sessions()

    @contextlib.contextmanager
    def write(self) -> Iterator[Session]:
        """A session inside one write transaction (committed on success)."""
        with self.sessions() as session, write_transaction(session):
            yield session

    # -- migrations ---------------------------------------------------------
    def _alembic_config(self) -> Config:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        return cfg

    def migrate(self) -> None:
        """Bring the schema to the newest migration (idempotent)."""
        cfg = self._alembic_config()
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def head_migration(self) -> str | None:
        return ScriptDirectory.from_config(self._alembic_config()).get_current_head()

    def current_migration(self) -> str | None:
        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def schema_is_current(self) -> bool:
        """True when the database answers and its schema is at the newest migration."""
        return self.current_migration() == self.head_migration()

    def dispose(self) -> None:
        self.engine.dispose()


@contextlib.contextmanager
def write_transaction(session: Session) -> Iterator[Session]:
    """Begin a write transaction on ``session``: committed if the block succeeds,
    rolled back (leaving no trace) if it raises. On SQLite it is ``BEGIN
    IMMEDIATE``, so concurrent writers wait their turn."""
    if session.in_transaction():
        session.rollback()
    with session.begin():
        session.connection(execution_options={_WRITE: True})
        yield session
