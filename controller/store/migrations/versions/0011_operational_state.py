"""Operational state and failure reaction (DESIGN.md, "Operational state and failure reaction").

``changes.overlay`` and ``deployments.overlay`` hold the failed links and
devices a plan leaves out (JSON, NULL for none): a failure reaction's change
carries one, and the active deployment's is the overlay in force. ``events``
is the stream behind ``GET /v1/events`` (its ids are the server-sent events'
ids, so a client resumes with ``Last-Event-ID``); ``operational_state`` keeps
the leader's view of links and devices for the followers.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN on both databases (SQLite's batch copy would break the foreign keys)
    with op.batch_alter_table("changes", recreate="never") as batch:
        batch.add_column(sa.Column("overlay", sa.Text(), nullable=True))
    with op.batch_alter_table("deployments", recreate="never") as batch:
        batch.add_column(sa.Column("overlay", sa.Text(), nullable=True))
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
    )
    op.create_index("ix_events_at", "events", ["at"])
    op.create_table(
        "operational_state",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("operational_state")
    op.drop_index("ix_events_at", table_name="events")
    op.drop_table("events")
    with op.batch_alter_table("deployments") as batch:
        batch.drop_column("overlay")
    with op.batch_alter_table("changes") as batch:
        batch.drop_column("overlay")
