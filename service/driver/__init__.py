"""The driver side: one sweep run on Ray Tune (sweeps), as a Ray job (``python -m service.driver
SWEEP_ID``) or in the CLI's process; its trials' states in the sweep record (trial_states), the
CLI's live progress (progress), packs sized to memory (pack_sizing), and where it ran (provenance).
It plans, trains, logs to MLflow and draws the figures at the end of the sweep."""
