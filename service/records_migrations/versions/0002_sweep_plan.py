"""The sweep's execution plan (service.driver.execution_plan), as the driver resolved it."""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    with op.batch_alter_table("sweeps") as batch:
        batch.add_column(sa.Column("plan", sa.JSON))


def downgrade() -> None:
    with op.batch_alter_table("sweeps") as batch:
        batch.drop_column("plan")
