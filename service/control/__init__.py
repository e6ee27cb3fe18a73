"""The control plane: what the REST service runs. Submitting a sweep (validated, recorded, started
as a Ray job), reading and cancelling it, and reconciling records with the jobs (a dead driver
replaced). It imports no torch, Ray Tune or matplotlib: work that needs them (checking a spec's
activations and footprint, drawing a running sweep's figures) goes to a worker process (worker)."""
