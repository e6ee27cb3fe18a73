"""Hypothesis: our error is far above the paper's (12.6%) because words never seen in the 1,000
training tweets are guessed, where the paper's pretrained tweet embeddings (not available) place
them near known words. If so, the error concentrates on those words. (Unseen: not in the training
tweets at all; with the spec's min_count 2, words seen once also map to <unk>, but they count as seen.)

Trains the chosen configuration (lr 1e-3, dropout 0.2, 30 epochs) of each activation for seeds
0-2, exactly as the sweep does (workers.train.train_epochs), and splits the test error of the
last epoch by whether the word is in the training vocabulary.

    ACTSWEEP_DATA_DIR=/path/to/data python docs/reproductions/twitter_pos/unseen_words.py  # a Markdown table
"""
import os
from pathlib import Path

import pandas as pd
import torch

from search_spaces.catalog import load_spec
from workers.data import load_dataset
from workers.data.twitter_pos import FILES, read_conll
from workers.models import build_model
from workers.train import train_epochs
from workers.trial import GridPoint

spec = load_spec("twitter_pos")
splits = load_dataset("twitter_pos", Path(os.environ.get("ACTSWEEP_DATA_DIR", "data")), False, 0, None,
                      spec.data_options.model_dump())
data = Path(os.environ.get("ACTSWEEP_DATA_DIR", "data")) / "twpos"
seen = {w.lower() for tweet in read_conll(data / FILES["train"]) for w, _ in tweet}
unseen = torch.as_tensor([w.lower() not in seen for tweet in read_conll(data / FILES["test"]) for w, _ in tweet])
rows = []
for activation in ["gelu_tanh", "relu", "elu"]:
    for seed in range(3):
        cfg = spec.trial_config(GridPoint(activation, 1e-3, 0.2, seed))
        state = {}
        for metrics in train_epochs(cfg, splits, on_state=state.update):
            pass
        model = build_model(cfg.model, splits.in_shape, splits.n_classes, cfg.activation_def, cfg.dropout,
                            vocab_size=len(splits.vocab))
        model.load_state_dict(state["model"])
        model.eval()
        with torch.no_grad():
            wrong = model(torch.as_tensor(splits.test_x)).argmax(1) != torch.as_tensor(splits.test_y)
        rows.append({"activation": activation, "seed": seed, "test_error": wrong.float().mean().item(),
                     "seen words": wrong[~unseen].float().mean().item(),
                     "unseen words": wrong[unseen].float().mean().item(),
                     "share of errors on unseen words": (wrong & unseen).sum().item() / wrong.sum().item()})
table = pd.DataFrame(rows).groupby("activation").median(numeric_only=True).drop(columns="seed")
print(f"Test tokens: {len(unseen)}; unseen in training: {unseen.float().mean().item():.1%}. "
      f"Medians over seeds 0-2 of the last epoch's errors:\n")
print(table.map(lambda v: f"{v:.1%}").to_markdown())
