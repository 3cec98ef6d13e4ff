"""A change's proposed revision is a proposal, off the head's line.

``revisions.proposal`` is true for a revision that a change proposed and that
no commit has yet folded into the intent: the head (what ``GET /v1/intent``
exports and ``If-Match`` compares) is the newest revision that is not a
proposal, so a dry run or a change on an older base never replaces the head
and the edits made on it (issue 31). Existing revisions are all on the line.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("revisions", recreate="never") as batch:  # SQLite: plain ALTER TABLE (see 0007)
        batch.add_column(sa.Column("proposal", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("revisions", recreate="never") as batch:  # SQLite: plain ALTER TABLE (see 0007)
        batch.drop_column("proposal")
