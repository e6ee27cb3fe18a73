"""The schema when migrations began: sweeps, their trials, and the reconciler's leases.

A new database gets every table. A database made before (by ``create_all`` and columns added one
by one) has the tables, perhaps without the sweep columns added since it was made: they are added,
empty.
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def _sweep_columns() -> list[sa.Column]:
    return [sa.Column("id", sa.String(32), primary_key=True),
            sa.Column("name", sa.String(200)),
            sa.Column("experiment", sa.String(100), nullable=False),
            sa.Column("quick", sa.Boolean, nullable=False),
            sa.Column("overrides", sa.JSON, nullable=False),
            sa.Column("spec", sa.JSON, nullable=False),
            sa.Column("state", sa.String(16), nullable=False),
            sa.Column("trials_total", sa.Integer, nullable=False),
            sa.Column("epochs", sa.Integer, nullable=False),
            sa.Column("idempotency_key", sa.String(200), unique=True),
            sa.Column("request_hash", sa.String(64)),
            sa.Column("cancel_requested", sa.Boolean, nullable=False),
            sa.Column("error", sa.Text),
            sa.Column("ray_job_id", sa.String(100)),
            sa.Column("mlflow_experiment_id", sa.String(64)),
            sa.Column("mlflow_parent_run_id", sa.String(64)),
            sa.Column("sequential", sa.JSON),
            sa.Column("runs_ended", sa.Boolean),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("started_at", sa.DateTime(timezone=True)),
            sa.Column("finished_at", sa.DateTime(timezone=True))]


def upgrade() -> None:
    tables = set(sa.inspect(op.get_bind()).get_table_names())
    if "sweeps" in tables:  # made before migrations: add the columns it lacks (empty)
        known = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("sweeps")}
        with op.batch_alter_table("sweeps") as batch:
            for column in _sweep_columns():
                if column.name not in known:
                    batch.add_column(sa.Column(column.name, column.type, nullable=True))
    else:
        op.create_table("sweeps", *_sweep_columns())
        op.create_index("ix_sweeps_state", "sweeps", ["state"])
    if "trials" not in tables:
        op.create_table("trials",
                        sa.Column("sweep_id", sa.String(32), sa.ForeignKey("sweeps.id", ondelete="CASCADE"),
                                  primary_key=True),
                        sa.Column("position", sa.Integer, primary_key=True),
                        sa.Column("activation", sa.String(32), nullable=False),
                        sa.Column("lr", sa.Float, nullable=False),
                        sa.Column("dropout", sa.Float, nullable=False),
                        sa.Column("seed", sa.Integer, nullable=False),
                        sa.Column("state", sa.String(16), nullable=False),
                        sa.Column("epoch", sa.Integer, nullable=False),
                        sa.Column("metrics", sa.JSON, nullable=False),
                        sa.Column("mlflow_run_id", sa.String(64)),
                        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False))
    if "leases" not in tables:
        op.create_table("leases",
                        sa.Column("name", sa.String(64), primary_key=True),
                        sa.Column("owner", sa.String(64), nullable=False),
                        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False))


def downgrade() -> None:
    for table in ("trials", "leases", "sweeps"):
        op.drop_table(table)
