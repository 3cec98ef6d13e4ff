"""Address allocations kept with revisions: each link's /31 and each device's router id stay put.

Links and devices used to be numbered by their position in the intent, so that
removing one renumbered every later one (and reset their BGP sessions). Now
(:mod:`controller.model.addressing`) each is placed by a hash of its own id,
and a revision keeps in ``revisions.allocation`` the **pins** of its allocation:
the few ids that a collision placed away from their home slot, which keep their
slot in every later revision. Existing revisions get no pins (their allocation
is the one their intent gives from nothing); the first commit after the upgrade
moves every link and router id once, from positional numbers to hashed ones.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ALTER TABLE on both databases (SQLite's batch copy would break the foreign keys to revisions)
    with op.batch_alter_table("revisions", recreate="never") as batch:
        batch.add_column(sa.Column("allocation", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("revisions", recreate="never") as batch:
        batch.drop_column("allocation")
