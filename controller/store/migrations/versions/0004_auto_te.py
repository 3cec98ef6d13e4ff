"""Automatic re-tuning: the measured figures that triggered a change, and the kill switch.

``changes.trigger`` keeps, as JSON, what made ``auto-te`` propose a change (the
measured window, the active plan's predicted maximum utilization under the
measured demand and the candidate's); ``auto_te_state`` is one row, the pause
switch, so that a pause survives a restart and holds for every replica.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("changes", sa.Column("trigger", sa.Text(), nullable=True))
    table = op.create_table(
        "auto_te_state",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_auto_te_state")),
    )
    op.bulk_insert(table, [{"id": 1, "paused": False, "actor": "loom", "reason": "",
                            "at": datetime(2026, 11, 24, tzinfo=UTC)}])


def downgrade() -> None:
    op.drop_table("auto_te_state")
    with op.batch_alter_table("changes") as batch:
        batch.drop_column("trigger")
