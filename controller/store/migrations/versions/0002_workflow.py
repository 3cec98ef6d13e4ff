"""The change workflow: changes, transitions, plans, deployments, drift reports, idempotency keys.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "changes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("base_revision", sa.Integer(), nullable=True),
        sa.Column("proposed_revision", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("author", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("review", sa.Text(), nullable=True),
        sa.Column("reviewed_active", sa.Integer(), nullable=True),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("progress", sa.Text(), nullable=True),
        sa.Column("force_reason", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("transaction", sa.String(length=64), nullable=True),
        sa.Column("previous_active", sa.Integer(), nullable=True),
        sa.Column("committing_slot", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["base_revision"], ["revisions.id"], name=op.f("fk_changes_base_revision_revisions")),
        sa.ForeignKeyConstraint(["proposed_revision"], ["revisions.id"],
                                name=op.f("fk_changes_proposed_revision_revisions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_changes")),
        sa.UniqueConstraint("committing_slot", name=op.f("uq_changes_committing_slot")),
    )
    op.create_index("ix_changes_state", "changes", ["state"], unique=False)
    op.create_table(
        "change_transitions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("change_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["change_id"], ["changes.id"], name=op.f("fk_change_transitions_change_id_changes")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_change_transitions")),
    )
    op.create_index("ix_change_transitions_change_id", "change_transitions", ["change_id"], unique=False)
    op.create_table(
        "plans",
        sa.Column("revision_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["revision_id"], ["revisions.id"], name=op.f("fk_plans_revision_id_revisions")),
        sa.PrimaryKeyConstraint("revision_id", name=op.f("pk_plans")),
    )
    op.create_table(
        "deployments",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("revision_id", sa.Integer(), nullable=False),
        sa.Column("change_id", sa.Integer(), nullable=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["revision_id"], ["revisions.id"], name=op.f("fk_deployments_revision_id_revisions")),
        sa.ForeignKeyConstraint(["change_id"], ["changes.id"], name=op.f("fk_deployments_change_id_changes")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployments")),
    )
    op.create_table(
        "drift_reports",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("active_revision", sa.Integer(), nullable=True),
        sa.Column("document", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_drift_reports")),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("key", sa.String(length=128), nullable=False),
        sa.Column("path", sa.String(length=512), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("actor", "key", name=op.f("pk_idempotency_keys")),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
    op.drop_table("drift_reports")
    op.drop_table("deployments")
    op.drop_table("plans")
    op.drop_index("ix_change_transitions_change_id", table_name="change_transitions")
    op.drop_table("change_transitions")
    op.drop_index("ix_changes_state", table_name="changes")
    op.drop_table("changes")
