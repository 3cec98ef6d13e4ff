"""Revisions stored by content: each object once, per revision only what changed.

Before, every revision row held a full copy of the intent document
(``revisions.document``): on a fabric of 100,000 devices, 16 MB per one-field
edit. Now (:mod:`controller.store.content`) objects live once in
``intent_objects`` by SHA-256, a revision lists in ``revision_entries`` the
objects it adds, changes, moves or removes, and names its frame (name, routing,
defaults) by ``top_hash``; ``whole`` marks sections written out completely.

The upgrade converts every existing revision in order, the first written out
whole and each later one as its delta on its parent, checks that each document
comes back byte for byte, keeps every content hash as stored, and then drops
the full copies. The downgrade writes the full copies back from the entries.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from controller.store.content import SnapshotCache, StoreOptions, convert_revision, load_snapshot
from controller.store.snapshot import dumps

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_revisions = sa.table("revisions", sa.column("id", sa.Integer), sa.column("hash", sa.String),
                      sa.column("document", sa.Text))


def upgrade() -> None:

    op.create_table(
        "intent_objects",
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("hash", name=op.f("pk_intent_objects")),
    )
    op.create_table(
        "revision_entries",
        sa.Column("revision_id", sa.Integer(), nullable=False),
        sa.Column("section", sa.String(length=32), nullable=False),
        sa.Column("ident", sa.String(length=512), nullable=False),
        sa.Column("pos", sa.BigInteger(), nullable=True),
        sa.Column("object_hash", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(["object_hash"], ["intent_objects.hash"],
                                name=op.f("fk_revision_entries_object_hash_intent_objects")),
        sa.ForeignKeyConstraint(["revision_id"], ["revisions.id"],
                                name=op.f("fk_revision_entries_revision_id_revisions")),
        sa.PrimaryKeyConstraint("revision_id", "section", "ident", name=op.f("pk_revision_entries")),
    )
    # plain ALTER TABLE on both databases: SQLite's batch mode would copy and drop the revisions
    # table, which the other tables' foreign keys refer to
    with op.batch_alter_table("revisions", recreate="never") as batch:
        batch.add_column(sa.Column("top_hash", sa.String(length=64), nullable=False, server_default=""))
        batch.add_column(sa.Column("whole", sa.String(length=128), nullable=False, server_default=""))
        batch.add_column(sa.Column("entries", sa.Integer(), nullable=False, server_default="0"))

    conn = op.get_bind()
    options = StoreOptions()
    base = None
    ids = list(conn.scalars(sa.select(_revisions.c.id).order_by(_revisions.c.id)))
    for rev_id in ids:
        content_hash, text = conn.execute(sa.select(_revisions.c.hash, _revisions.c.document)
                                          .where(_revisions.c.id == rev_id)).one()
        document = json.loads(text)
        base = convert_revision(conn, rev_id, document, content_hash, base, options)
        if dumps(base.document()).decode() != text:
            raise RuntimeError(f"revision {rev_id} would not read back byte for byte: migration stopped")

    with op.batch_alter_table("revisions", recreate="never") as batch:
        batch.drop_column("document")


def downgrade() -> None:

    with op.batch_alter_table("revisions", recreate="never") as batch:
        batch.add_column(sa.Column("document", sa.Text(), nullable=False, server_default=""))
    conn = op.get_bind()
    cache = SnapshotCache()
    for rev_id in list(conn.scalars(sa.select(_revisions.c.id).order_by(_revisions.c.id))):
        text = dumps(load_snapshot(conn, rev_id, cache, allocations=False).document()).decode()
        conn.execute(_revisions.update().where(_revisions.c.id == rev_id).values(document=text))
    with op.batch_alter_table("revisions", recreate="never") as batch:
        batch.drop_column("entries")
        batch.drop_column("whole")
        batch.drop_column("top_hash")
    op.drop_table("revision_entries")
    op.drop_table("intent_objects")
