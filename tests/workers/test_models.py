import torch
from torch import nn

from workers.init import unit_norm_rows_
from workers.models import MLP


def test_unit_norm_rows_gives_each_unit_unit_norm_and_zero_bias():
    layer = unit_norm_rows_(nn.Linear(784, 128))
    torch.testing.assert_close(layer.weight.norm(dim=1), torch.ones(128))
    assert torch.count_nonzero(layer.bias) == 0


def test_paper_mlp_has_8_hidden_layers_of_128_all_unit_norm():
    model = MLP(784, 10, depth=8, width=128, activation="gelu", dropout=0.5)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [tuple(m.weight.shape) for m in linears] == [(128, 784)] + [(128, 128)] * 7 + [(10, 128)]
    for layer in linears:
        torch.testing.assert_close(layer.weight.norm(dim=1), torch.ones(layer.out_features))
    assert sum(isinstance(m, nn.Dropout) for m in model.modules()) == 8
    assert model(torch.randn(5, 784)).shape == (5, 10)


def test_no_dropout_layers_without_dropout():
    model = MLP(64, 10, depth=2, width=16, activation="relu", dropout=0.0)
    assert not any(isinstance(m, nn.Dropout) for m in model.modules())
