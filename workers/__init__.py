"""Training side of actsweep: activations, models, datasets, the training loop and the Ray Tune trainable."""
