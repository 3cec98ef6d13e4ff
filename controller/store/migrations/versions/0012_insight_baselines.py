"""Baselines and anomalies (DESIGN.md, ML workloads: policy ``insight``).

``insight_baselines`` keeps each job's and link's learned baseline (a JSON
document keyed ``job:NAME`` or ``link:ID``) so that a restart or a new leader
goes on from what was learned.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "insight_baselines",
        sa.Column("key", sa.String(400), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("insight_baselines")
