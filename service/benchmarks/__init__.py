"""What ``actsweep bench`` runs (service.benchmarks.speed dispatches by ``--workload``):

- speed: training speed, a plain PyTorch loop vs per-trial vs fused packs (quick, paper);
- engine: the fused engine without Ray Tune or MLflow (speed's engine variants, its step ops);
- scale: a sweep's bookkeeping at 100 to 10,000 trials (scale);
- bookkeeping: the MLflow logger alone, with a stand-in trainable (bookkeeping);
- load: the REST API under many clients at once (load).

One-off investigations, whose answers are in docs/, are scripts in the top-level benchmarks/.
"""
