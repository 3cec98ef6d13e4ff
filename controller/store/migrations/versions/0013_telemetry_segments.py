"""Stored telemetry (issue 31.2): the collector's interval rates, in segments.

``telemetry_segments`` holds what the leader's collector measured, one row per
archive interval (the rates ending in ``(start, end]`` of every counter, as a
numpy ``npz`` blob), so that a restarted replica answers a window of the last
``telemetry_keep_s`` with what it did not see itself. Older segments are pruned.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "telemetry_segments",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("start", sa.Float(), nullable=False),
        sa.Column("end", sa.Float(), nullable=False),
        sa.Column("entries", sa.Integer(), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
    )
    op.create_index("ix_telemetry_segments_end", "telemetry_segments", ["end"])


def downgrade() -> None:
    op.drop_index("ix_telemetry_segments_end", table_name="telemetry_segments")
    op.drop_table("telemetry_segments")
