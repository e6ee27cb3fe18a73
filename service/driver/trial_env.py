"""The runtime environment Ray Tune gives every trial actor. A worker process serves an actor only
where their runtime environments are the same: a warm trial worker (service.driver.warm) is started
in this one, and the driver's footprint task runs in it (service.driver.observations)."""
from __future__ import annotations

import os


def tune_runtime_env() -> dict:
    """Tune's trial actors' runtime environment: its few variables (ray.tune.execution.class_cache)."""
    from ray.tune.execution.class_cache import DEFAULT_ENV_VARS, ENV_VARS_TO_PROPAGATE

    return {"env_vars": {**DEFAULT_ENV_VARS, **{k: os.environ[k] for k in ENV_VARS_TO_PROPAGATE if k in os.environ}}}
