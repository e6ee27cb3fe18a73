"""How far each gelu(sigma) trial is from the ReLU trial of the same seed and lr (same initial
weights, same data order), per epoch: median over seeds of |train_loss_eval(gelu) - train_loss_eval(relu)|.

    python docs/reproductions/gelu_sigma_bridge/distance_to_relu.py   # prints a Markdown table
"""
from pathlib import Path

import pandas as pd

data = pd.concat(pd.read_csv(p) for p in sorted(Path(__file__).parent.glob("data/*.csv.gz")))
wide = data.pivot_table(index=["lr", "seed", "epoch"], columns="activation", values="train_loss_eval")
gaps = wide.drop(columns="relu").sub(wide["relu"], axis=0).abs()
table = gaps.groupby(["lr", "epoch"]).median()
order = sorted(table.columns, key=lambda name: float(name.split("=")[1].rstrip(")")) if "=" in name else 1.0)
print(table[order].map(lambda v: f"{v:.4f}").to_markdown())
