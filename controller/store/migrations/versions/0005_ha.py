"""High availability: the leader lease, the replicas' heartbeats, and who runs a committing change.

``leader_lease`` is one row (id 1): the replica holding the lease, its epoch
(raised by one at each acquisition; the agents' fence) and its expiry in the
database's clock (seconds since 1970). ``replicas`` keeps each replica's last
heartbeat for ``GET /v1/cluster``. ``changes.runner_epoch`` is the epoch of the
leader that took a committing change up: NULL while the change waits in the
queue; a leader of another epoch finding it set recovers the change instead of
pushing it again, and a deposed leader's late writes to it are refused.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("changes", sa.Column("runner_epoch", sa.Integer(), nullable=True))
    # a change committing across the upgrade was being pushed by the old controller: recover it, never re-push
    op.execute("UPDATE changes SET runner_epoch = 0 WHERE state = 'committing'")
    lease = op.create_table(
        "leader_lease",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("acquired_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leader_lease")),
    )
    op.bulk_insert(lease, [{"id": 1, "holder": None, "epoch": 0, "expires_at": 0.0, "acquired_at": 0.0}])
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("url", sa.String(length=512), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("seen_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replicas")),
    )


def downgrade() -> None:
    op.drop_table("replicas")
    op.drop_table("leader_lease")
    with op.batch_alter_table("changes") as batch:
        batch.drop_column("runner_epoch")
