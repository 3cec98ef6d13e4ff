"""Token names unique among unrevoked tokens; the audit log keeps the client's address.

Live tokens that already share a name keep the oldest one's name; each of the
others gets its id appended (``ci (a1b2c3d4e5f6)``), so the unique index can be
built on any existing store.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_UNREVOKED = sa.text("revoked_at IS NULL")


def upgrade() -> None:
    conn = op.get_bind()
    seen: set[str] = set()
    rows = conn.execute(sa.text("SELECT id, name FROM tokens WHERE revoked_at IS NULL ORDER BY created_at, id"))
    for token_id, name in rows.all():
        if name in seen:
            suffix = f" ({token_id})"
            conn.execute(sa.text("UPDATE tokens SET name = :name WHERE id = :id"),
                         {"name": name[:128 - len(suffix)] + suffix, "id": token_id})
        seen.add(name)
    op.create_index("uq_tokens_name_unrevoked", "tokens", ["name"], unique=True, sqlite_where=_UNREVOKED,
                    postgresql_where=_UNREVOKED)
    op.add_column("audit", sa.Column("client", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit") as batch:
        batch.drop_column("client")
    op.drop_index("uq_tokens_name_unrevoked", table_name="tokens")
