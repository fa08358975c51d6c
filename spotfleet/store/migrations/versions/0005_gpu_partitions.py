"""GPU partitions: how each attempt's GPU share was isolated, its share used, and agent stop reasons

attempt_usage gains the isolation the agent applied (mig, mps, time-sliced,
whole) with its note, the share given, the share used (mean over samples) and
the memory limit; node_reports gains the agent's message (why it refused or
stopped a job node).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempt_usage") as batch:
        batch.add_column(sa.Column("isolation", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("isolation_note", sa.Text(), nullable=True))
        batch.add_column(sa.Column("given_share", sa.Float(), nullable=True))
        batch.add_column(sa.Column("share_samples", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("used_share_sum", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("memory_limit_mib", sa.Float(), nullable=True))
    with op.batch_alter_table("node_reports") as batch:
        batch.add_column(sa.Column("message", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node_reports") as batch:
        batch.drop_column("message")
    with op.batch_alter_table("attempt_usage") as batch:
        for column in ("memory_limit_mib", "used_share_sum", "share_samples", "given_share", "isolation_note",
                       "isolation"):  # fmt: skip
            batch.drop_column(column)
