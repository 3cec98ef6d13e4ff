"""Alembic environment for Loom's store: runs on the connection the caller
passes in ``config.attributes["connection"]`` (see :meth:`Database.migrate`),
or on ``sqlalchemy.url`` when run from the alembic command line."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from controller.store.models import metadata

config = context.config


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    conn = config.attributes.get("connection")
    if conn is not None:
        _run(conn)
    else:
        engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
        with engine.begin() as connection:
            _run(connection)
