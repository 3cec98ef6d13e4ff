"""Database plumbing: engines, sessions, write transactions and migrations.

:class:`Database` wraps one SQLAlchemy engine for a URL: SQLite (the default,
``sqlite:///./loom.db``; WAL journal, foreign keys on, ``BEGIN IMMEDIATE`` for
write transactions so writers queue instead of failing half way) or PostgreSQL
(``postgresql+psycopg://...``). Alembic migrations live in this package
(``controller/store/migrations``) and run programmatically: :meth:`Database.migrate`
brings the schema to head, :meth:`Database.schema_is_current` tells ``/readyz``.

Failures of the database itself become Loom's errors here, so nothing above the
store sees a driver exception: an operational error of the driver (connection
refused or lost, the server shutting down, a lock or statement timeout), a
closed connection or an exhausted pool is :class:`StoreUnavailable`, and a
serialization failure or deadlock (SQLSTATE 40001, 40P01) is
:class:`StoreContention`, which :func:`retrying` runs again after a jittered
back-off. Writers that append to the revision chain queue on one lock
(:func:`lock_revisions`), as SQLite's ``BEGIN IMMEDIATE`` makes every writer do.

A replicated PostgreSQL (a failover manager such as pg_auto_failover in front of a
primary and a synchronous standby, ``docs/store-ha.md``) is reached by a multi-host
URL, ``postgresql+psycopg://u@/loom?host=a,b&port=5432,5433&target_session_attrs=read-write``:
each new connection goes to whichever node takes writes. During a switch the errors
of a failover (connection refused or lost, SQLSTATE class 08; the server shutting
down, class 57P; a read-only transaction on a standby, 25006) are
:class:`StoreUnavailable` (503 with ``Retry-After``) and invalidate the whole pool, so
no pooled connection to the old primary is used again (``pool_pre_ping`` checks the
others). A write whose COMMIT was sent when the connection died has an unknown outcome:
:func:`write_transaction` raises :class:`StoreOutcomeUnknown` for it (the same 503), so it
is never acknowledged; a retry with the same ``Idempotency-Key`` finds it if it was applied.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, func, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import PoolProxiedConnection, QueuePool

from controller.model.errors import StoreContention, StoreOutcomeUnknown, StoreUnavailable
from controller.store.content import HeadCache, SnapshotCache, StoreOptions, install_cache_hooks
from controller.store.replication import auto_ack_standbys, await_standbys, server_identity

__all__ = ["DEFAULT_URL", "Database", "RetryOptions", "lock_revisions", "normalize_url", "retrying", "store_error",
           "switching", "write_transaction"]

DEFAULT_URL = "sqlite:///./loom.db"
MIGRATIONS = Path(__file__).parent / "migrations"
_WRITE = "loom_write"
_DATABASE = "loom_database"  # Session.info key: the Database the session belongs to
#: the PostgreSQL advisory lock that writers of the revision chain queue on ("LOOM" and 1)
REVISIONS_LOCK = 0x4C4F4F4D_0001
#: SQLSTATEs of a transaction that lost to a concurrent one: serialization failure, deadlock
_CONTENTION = frozenset({"40001", "40P01"})
#: SQLSTATEs (and classes) of a store that is switching over: the connection is no longer to a primary
_SWITCHING = frozenset({"25006"})  # read_only_sql_transaction: a standby (or a demoted primary) answered
_SWITCHING_CLASSES = ("08", "57P")  # connection exception; operator intervention (shutdown, crash, starting)
log = logging.getLogger("loom.store")
T = TypeVar("T")


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


def store_error(orig: BaseException, dbapi: Any, *, disconnect: bool = False) -> StoreUnavailable | None:
    """The Loom error a driver exception ``orig`` stands for (``dbapi``: the driver's module), or
    ``None`` when it is not the database's failure (a constraint, a bad statement: those stay
    SQLAlchemy's). Contention (SQLSTATE 40001, 40P01) is :class:`StoreContention`; a lost
    connection, any other operational error and a closed connection are :class:`StoreUnavailable`."""
    sqlstate = getattr(orig, "sqlstate", None)
    first = (str(orig).strip().splitlines() or [""])[0][:200]
    if sqlstate in _CONTENTION:
        return StoreContention(f"the store refused a transaction that raced another ({sqlstate}): {first}")
    if switching(orig):
        return StoreUnavailable(f"the store is switching over ({sqlstate}): {first}")
    operational = getattr(dbapi, "OperationalError", ()), getattr(dbapi, "InterfaceError", ())
    if disconnect or isinstance(orig, operational):
        return StoreUnavailable(f"the store does not answer: {type(orig).__name__}: {first}")
    return None


def switching(orig: BaseException) -> bool:
    """Whether the driver error ``orig`` says the connection is not (or no longer) to a primary that
    takes writes: a standby answered (25006), the server is shutting down or starting (57P), or the
    connection failed (class 08). Such a connection is of no further use, nor are its pool's siblings."""
    sqlstate = getattr(orig, "sqlstate", None) or ""
    return sqlstate in _SWITCHING or sqlstate.startswith(_SWITCHING_CLASSES)


def _translate_errors(engine: Engine) -> None:
    """Raise the store's errors in place of the driver's, for every statement and every connect.
    Not during the pool's pre-ping: a dead pooled connection is replaced there, quietly. An error of
    a switch-over (:func:`switching`) counts as a disconnect: SQLAlchemy then discards the connection
    and invalidates the rest of the pool (connections to the old primary)."""

    @event.listens_for(engine, "handle_error")
    def _on_error(ctx: ExceptionContext) -> None:
        if switching(ctx.original_exception):
            ctx.is_disconnect = True
        if ctx.is_pre_ping:
            return
        err = store_error(ctx.original_exception, ctx.dialect.loaded_dbapi, disconnect=ctx.is_disconnect)
        if err is not None:
            raise err from ctx.sqlalchemy_exception


class _QueuePool(QueuePool):
    """SQLAlchemy's pool, whose timeout waiting for a free connection is :class:`StoreUnavailable`."""

    def connect(self) -> PoolProxiedConnection:
        try:
            return super().connect()
        except sa_exc.TimeoutError as exc:
            raise StoreUnavailable(f"the store's connection pool had no free connection in {self.timeout()} s "
                                   f"({self.size()} + {self._max_overflow} in use)") from exc


class Database:
    """One store: an engine, a session factory and the migration scripts. ``lock_timeout_s`` bounds
    how long a PostgreSQL writer waits for a lock, ``pool_timeout_s`` how long a session waits for a
    free connection of the pool; past either the request is :class:`StoreUnavailable`.
    ``write_idle_timeout_s`` bounds how long a PostgreSQL write transaction may wait between two
    statements: PostgreSQL ends one idle longer (``idle_in_transaction_session_timeout``), so a process
    paused inside one (SIGSTOP, a frozen VM) does not keep its row locks from a new leader.
    ``ack_standbys``: how many standbys must have flushed a committed write before it is acknowledged
    (:mod:`controller.store.replication`; None: one on a multi-host PostgreSQL URL, none otherwise), waited
    for up to ``ack_timeout_s``."""

    def __init__(self, url: str = DEFAULT_URL, *, echo: bool = False, lock_timeout_s: float = 15.0,
                 pool_timeout_s: float = 30.0, options: StoreOptions | None = None,
                 write_idle_timeout_s: float = 60.0, ack_standbys: int | None = None, ack_timeout_s: float = 1.0):
        self.url = normalize_url(url)
        parsed = make_url(self.url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        self.lock_timeout_s = lock_timeout_s
        self.write_idle_timeout_s = write_idle_timeout_s
        self.ack_standbys = 0 if self.is_sqlite else \
            auto_ack_standbys(self.url) if ack_standbys is None else ack_standbys
        self.ack_timeout_s = ack_timeout_s
        kwargs: dict[str, Any] = {"echo": echo, "future": True}
        pooled = {"poolclass": _QueuePool, "pool_timeout": pool_timeout_s}
        if self.is_sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
            if parsed.database not in (None, "", ":memory:"):
                kwargs.update(pooled)  # a file (an in-memory store keeps its single connection)
        else:
            kwargs["pool_pre_ping"] = True
            kwargs.update(pooled)
        self.engine = create_engine(self.url, **kwargs)
        _translate_errors(self.engine)
        if self.is_sqlite:
            _sqlite_setup(self.engine)
        else:
            _postgres_setup(self.engine, lock_timeout_s)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        #: the revisions' snapshots this process built (controller.store.content), shared by its sessions
        self.snapshots = SnapshotCache(options)
        #: the head revision as last seen, for reads that may be a moment old (controller.service.cached_head)
        self.heads = HeadCache()
        install_cache_hooks(self.sessions, self.snapshots, self.heads)
        self.sessions.kw.setdefault("info", {})[_DATABASE] = self  # (after the hooks, which set info)

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
        cfg = _scripts_config()
        cfg.set_main_option("sqlalchemy.url", self.url.replace("%", "%%"))
        return cfg

    def migrate(self) -> None:
        """Bring the schema to the newest migration (idempotent)."""
        cfg = self._alembic_config()
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def head_migration(self) -> str | None:
        return _head_migration()

    def current_migration(self) -> str | None:
        """The schema's migration, read from alembic's version table (not through a MigrationContext, which
        logs two info lines per call: ``/readyz`` asks on every probe)."""
        with self.engine.connect() as conn:
            try:  # one statement on the probe's path; the catalog only when it fails (a store never migrated)
                return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            except (sa_exc.DBAPIError, StoreUnavailable):  # the store's hook may have named it unavailable
                conn.rollback()
                if sa_inspect(conn).has_table("alembic_version"):
                    raise
                return None

    def schema_is_current(self) -> bool:
        """True when the database answers and its schema is at the newest migration."""
        return self.current_migration() == self.head_migration()

    def dispose(self) -> None:
        self.engine.dispose()


@functools.cache
def _head_migration() -> str | None:
    """The newest migration of this code, read from the scripts once per process: ``/readyz`` asks on every
    probe, several times a second behind a balancer, and parsing them costs milliseconds of CPU each time."""
    return ScriptDirectory.from_config(_scripts_config()).get_current_head()


def _scripts_config() -> Config:
    """Alembic's configuration naming this package's migration scripts (no database yet)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def _postgres_setup(engine: Engine, lock_timeout_s: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        with dbapi_conn.cursor() as cur:  # a writer waits this long for a lock, then gives up (SQLSTATE 55P03)
            cur.execute(f"SET lock_timeout = {int(lock_timeout_s * 1000)}")
        dbapi_conn.commit()


def lock_revisions(session: Session) -> None:
    """Queue this write transaction behind any other that appends to the revision chain, until it
    ends: read the head after this, and no concurrent writer can store the same next revision.
    PostgreSQL: a transaction-scoped advisory lock; SQLite: nothing (``BEGIN IMMEDIATE`` already)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(REVISIONS_LOCK)))


@dataclass(frozen=True)
class RetryOptions:
    """How a write that lost a race is run again: at most ``attempts`` runs, the n-th retry after a
    random pause of up to ``min(cap_s, base_s * 2**n)`` seconds ("full jitter")."""

    attempts: int = 8
    base_s: float = 0.02
    cap_s: float = 1.0

    def pause(self, retry: int, rng: Callable[[], float] = random.random) -> float:
        return rng() * min(self.cap_s, self.base_s * 2 ** retry)


def retrying(run: Callable[[], T], *, retry_on: tuple[type[BaseException], ...] = (StoreContention,),
             options: RetryOptions = RetryOptions(), sleep: Callable[[float], None] = time.sleep,
             rng: Callable[[], float] = random.random) -> T:
    """``run()`` (which opens and ends its own transaction), again after a jittered back-off while it
    raises one of ``retry_on`` (the serialization failures of :class:`StoreContention` by default),
    at most ``options.attempts`` times; then the last error is raised."""
    for attempt in range(options.attempts):
        try:
            return run()
        except retry_on as exc:
            if attempt + 1 >= options.attempts:
                raise
            pause = options.pause(attempt, rng)
            log.info("write lost a race (%s); attempt %d of %d in %.3f s", type(exc).__name__, attempt + 2,
                     options.attempts, pause)
            sleep(pause)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def write_transaction(session: Session) -> Iterator[Session]:
    """Begin a write transaction on ``session``: committed if the block succeeds,
    rolled back (leaving no trace) if it raises. On SQLite it is ``BEGIN
    IMMEDIATE``, so concurrent writers wait their turn. The store failing during
    the COMMIT itself (the statements before it all done) is :class:`StoreOutcomeUnknown`:
    the write may have been applied, and must not be answered as done, nor as not done."""
    if session.in_transaction():
        session.rollback()
    committing = False
    db: Database | None = session.info.get(_DATABASE)
    acks = db if db is not None and db.ack_standbys > 0 else None  # the store whose standbys must hold it
    try:
        with session.begin():
            session.connection(execution_options={_WRITE: True})
            if db is not None and not db.is_sqlite and db.write_idle_timeout_s > 0:
                ms = int(db.write_idle_timeout_s * 1000)  # (SET LOCAL takes no bind parameter)
                session.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = {ms}"))
            primary = server_identity(session) if acks is not None else ()
            yield session
            session.flush()  # every statement before the COMMIT: a failure up to here wrote nothing
            committing = True
        if acks is not None:  # acknowledged once a standby holds it, whatever the failover manager does
            await_standbys(acks.engine, primary, acks.ack_standbys, acks.ack_timeout_s)
    except StoreOutcomeUnknown:
        raise
    except StoreUnavailable as exc:
        if committing and not isinstance(exc, StoreContention):
            raise StoreOutcomeUnknown(f"the store failed while committing, the write may or may not have been "
                                      f"applied (retry it with the same Idempotency-Key): {exc}") from exc
        raise
