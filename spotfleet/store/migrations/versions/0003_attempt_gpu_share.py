"""job_attempts.gpu_share: GPUs' worth held (whole GPUs, MIG slices/7 or a fraction)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_attempts") as batch:
        batch.add_column(sa.Column("gpu_share", sa.Float(), nullable=False, server_default="0"))
    op.execute("UPDATE job_attempts SET gpu_share = gpus + mig_slices / 7.0")


def downgrade() -> None:
    with op.batch_alter_table("job_attempts") as batch:
        batch.drop_column("gpu_share")
