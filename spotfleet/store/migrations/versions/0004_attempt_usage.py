"""attempt_usage: per-attempt progress, checkpoints and GPU telemetry for the cost ledger

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "attempt_usage",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.String(length=64), nullable=False),
        sa.Column("resume_step", sa.Integer(), nullable=True),
        sa.Column("first_step", sa.Integer(), nullable=True),
        sa.Column("first_progress_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_step", sa.Integer(), nullable=True),
        sa.Column("last_progress_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("checkpoint_step", sa.Integer(), nullable=True),
        sa.Column("checkpoint_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("gpu_samples", sa.Integer(), nullable=False),
        sa.Column("gpu_util_sum", sa.Float(), nullable=False),
        sa.Column("gpu_idle_samples", sa.Integer(), nullable=False),
        sa.Column("peak_gpu_memory_mib", sa.Float(), nullable=False),
        sa.Column("gpu_memory_total_mib", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "attempt", "node_rank", name=op.f("pk_attempt_usage")),
    )


def downgrade() -> None:
    op.drop_table("attempt_usage")
