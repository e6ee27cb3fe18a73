"""Orchestration side of actsweep: settings, the sweep driver, the aggregator, CLI and REST."""
import os

# MLflow's telemetry, where on, sets _MLFLOW_TELEMETRY_SESSION_ID in os.environ as mlflow is imported,
# and deletes it from a background thread once fetching its config fails (always, offline). A thread
# reading os.environ at that moment raises KeyError: requests reads it on every HTTP call, and a
# sweep over an MLflow server failed so in a test run. actsweep sends no telemetry; a user's own
# MLFLOW_DISABLE_TELEMETRY wins.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
