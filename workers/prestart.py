"""What a home's Ray head has its worker processes import as they start (``preload_python_modules``,
service.control.local_head.HEAD_SYSTEM_CONFIG).

A worker that Ray starts ahead of any job (the warm trial workers a home's driver server asks for:
service.driver.warm; their RAY_JOB_ID is the nil id) imports what a trial imports first: torch,
the trainable and Ray Tune, so the next sweep's trial starts in a fraction of a second instead of
seconds. A worker started for a job (a job's supervisor, a driver's own tasks) imports nothing
here: it starts as fast as before and holds no torch it does not use.

Nothing here may fail: a preload that raises would end every worker the head starts.
"""
import os

NIL_JOB_ID = "ffffffff"  # (the RAY_JOB_ID of a worker started for no job yet)

if os.environ.get("RAY_JOB_ID") == NIL_JOB_ID:
    try:
        import ray.tune  # noqa: F401  (the trial actor's own imports)
        import torch  # noqa: F401
        import workers.trainable  # noqa: F401
    except Exception:  # (a trial then imports them itself, as a cold one does)
        pass
