"""Running sweeps: the driver of one sweep on Ray Tune (sweeps; driver.py as a Ray job), the sweep
records the REST service keeps (records), submitting, replacing and cancelling drivers as Ray
jobs (jobs, submission), trial states and the CLI's live progress (trial_states, progress), and
where a sweep ran (provenance)."""
