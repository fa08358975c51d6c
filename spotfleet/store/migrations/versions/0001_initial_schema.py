"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-12-02 11:11:03.434651
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "agent_presence",
        sa.Column("instance_id", sa.String(length=64), nullable=False),
        sa.Column("provider_id", sa.String(length=128), nullable=True),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("info", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("instance_id", name=op.f("pk_agent_presence")),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("level", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("instance_id", sa.String(length=64), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_events_at"), ["at"], unique=False)
        batch_op.create_index(batch_op.f("ix_events_instance_id"), ["instance_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_events_job_id"), ["job_id"], unique=False)

    op.create_table(
        "instances",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("provider_id", sa.String(length=128), nullable=True),
        sa.Column("request_id", sa.String(length=128), nullable=False),
        sa.Column("offering", sa.JSON(), nullable=False),
        sa.Column("market", sa.String(length=16), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("zone", sa.String(length=64), nullable=False),
        sa.Column("price_per_hour", sa.Float(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state_since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("launched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("terminated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("idle_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("address", sa.String(length=256), nullable=True),
        sa.Column("cordoned", sa.Boolean(), nullable=False),
        sa.Column("notice_kind", sa.String(length=32), nullable=True),
        sa.Column("notice_deadline", sa.DateTime(timezone=True), nullable=True),
        sa.Column("agent_token_hash", sa.String(length=128), nullable=False),
        sa.Column("launch_attempts", sa.Integer(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instances")),
        sa.UniqueConstraint("request_id", name=op.f("uq_instances_request_id")),
    )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_instances_agent_token_hash"), ["agent_token_hash"], unique=False)
        batch_op.create_index(batch_op.f("ix_instances_provider_id"), ["provider_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_instances_state"), ["state"], unique=False)

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("family", sa.String(length=128), nullable=False),
        sa.Column("priority", sa.String(length=32), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state_since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("interruptions", sa.Integer(), nullable=False),
        sa.Column("bindings", sa.JSON(), nullable=False),
        sa.Column("checkpoint", sa.JSON(), nullable=True),
        sa.Column("progress", sa.JSON(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("drain_deadline", sa.DateTime(timezone=True), nullable=True),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_jobs_family"), ["family"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_state"), ["state"], unique=False)
        batch_op.create_index(batch_op.f("ix_jobs_tenant"), ["tenant"], unique=False)

    op.create_table(
        "node_reports",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("checkpoint", sa.JSON(), nullable=True),
        sa.Column("progress", sa.JSON(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job_id", "attempt", "node_rank", name=op.f("pk_node_reports")),
    )
    op.create_table(
        "notices",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("provider_instance_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deadline", sa.DateTime(timezone=True), nullable=True),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("processed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notices")),
    )
    with op.batch_alter_table("notices", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_notices_processed_at"), ["processed_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_notices_provider_instance_id"), ["provider_instance_id"], unique=False)

    op.create_table(
        "unavailable_offerings",
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_unavailable_offerings")),
    )
    op.create_table(
        "billing_segments",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("instance_id", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("zone", sa.String(length=64), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("market", sa.String(length=16), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("price_per_hour", sa.Float(), nullable=False),
        sa.Column("on_demand_price_per_hour", sa.Float(), nullable=False),
        sa.Column("start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("end", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["instance_id"],
            ["instances.id"],
            name=op.f("fk_billing_segments_instance_id_instances"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_billing_segments")),
    )
    with op.batch_alter_table("billing_segments", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_billing_segments_instance_id"), ["instance_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_billing_segments_start"), ["start"], unique=False)

    op.create_table(
        "job_attempts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.String(length=64), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("mig_slices", sa.Integer(), nullable=False),
        sa.Column("bound_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(["instance_id"], ["instances.id"], name=op.f("fk_job_attempts_instance_id_instances")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_attempts_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_attempts")),
    )
    with op.batch_alter_table("job_attempts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_attempts_instance_id"), ["instance_id"], unique=False)
        batch_op.create_index("ix_job_attempts_job_attempt", ["job_id", "attempt"], unique=False)
        batch_op.create_index(batch_op.f("ix_job_attempts_job_id"), ["job_id"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("job_attempts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_attempts_job_id"))
        batch_op.drop_index("ix_job_attempts_job_attempt")
        batch_op.drop_index(batch_op.f("ix_job_attempts_instance_id"))

    op.drop_table("job_attempts")
    with op.batch_alter_table("billing_segments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_billing_segments_start"))
        batch_op.drop_index(batch_op.f("ix_billing_segments_instance_id"))

    op.drop_table("billing_segments")
    op.drop_table("unavailable_offerings")
    with op.batch_alter_table("notices", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_notices_provider_instance_id"))
        batch_op.drop_index(batch_op.f("ix_notices_processed_at"))

    op.drop_table("notices")
    op.drop_table("node_reports")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_tenant"))
        batch_op.drop_index(batch_op.f("ix_jobs_state"))
        batch_op.drop_index(batch_op.f("ix_jobs_family"))

    op.drop_table("jobs")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_instances_state"))
        batch_op.drop_index(batch_op.f("ix_instances_provider_id"))
        batch_op.drop_index(batch_op.f("ix_instances_agent_token_hash"))

    op.drop_table("instances")
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_events_job_id"))
        batch_op.drop_index(batch_op.f("ix_events_instance_id"))
        batch_op.drop_index(batch_op.f("ix_events_at"))

    op.drop_table("events")
    op.drop_table("agent_presence")
