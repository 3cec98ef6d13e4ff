"""A change is final only when the fabric is: what is left to settle after its commit.

``changes.settled`` is NULL before a commit ends (and for changes older than
this migration), true once every device runs the revision the change's final
state names, false while some device still does not (an agent that was down
when it should have been rolled back or confirmed); ``changes.settle`` is the
JSON document the leader keeps while it drives those devices (the target
revision, the devices still pending and why, attempts, when it last looked).

Revision ID: 0009
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("changes") as batch:
        batch.add_column(sa.Column("settled", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("settle", sa.Text(), nullable=True))
        batch.create_index("ix_changes_settled", ["settled"])


def downgrade() -> None:
    with op.batch_alter_table("changes") as batch:
        batch.drop_index("ix_changes_settled")
        batch.drop_column("settle")
        batch.drop_column("settled")
