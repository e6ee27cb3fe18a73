"""The MLflow side of actsweep: the store of sweeps and trial runs (store: every MLflow call, tag
name and filter string), the trial logger Tune calls in the driver (logger), the cache of
finished trials (cache), and tidy exports of a sweep's runs (exports)."""
