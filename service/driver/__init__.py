"""The driver side: one sweep run on Ray Tune (sweeps), as a Ray job (``python -m service.driver
SWEEP_ID``) or in the CLI's process; its execution plan, resolved from what the cluster reports
(execution_plan, observations); its trials' states in the sweep record (trial_states), the CLI's
live progress (progress), and where it ran (provenance). It plans, trains, logs to MLflow and draws
the figures at the end of the sweep."""
