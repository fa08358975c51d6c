"""fleet_hold: `spotfleet down` holds the whole fleet (no purchases) until `spotfleet resume`

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleet_hold",
        sa.Column("cluster", sa.String(length=64), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("grace_seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", name=op.f("pk_fleet_hold")),
    )


def downgrade() -> None:
    op.drop_table("fleet_hold")
