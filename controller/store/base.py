"""The store's declarative base: one ``metadata`` with one naming convention for constraints, so Alembic
migrations stay portable between SQLite and PostgreSQL. The tables are in :mod:`controller.store.models`
(revisions, tokens, audit) and :mod:`controller.store.workflow_models` (the change workflow's); both build on
this module, and importing :mod:`controller.store.models` registers every table in ``metadata``.
"""

from __future__ import annotations

from sqlalchemy import MetaData
from sqlalchemy.orm import DeclarativeBase

__all__ = ["Base", "NAMING_CONVENTION", "metadata"]

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Base(DeclarativeBase):
    metadata = metadata
