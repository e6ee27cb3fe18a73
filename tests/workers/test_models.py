import pytest
import torch
from torch import nn

from search_spaces import load_spec
from workers.init import unit_norm_rows_
from workers.models import MLP, build_model


def spec_model(name: str, **changes) -> dict:
    """A catalog experiment's model block, as the trials get it."""
    return {**load_spec(name).model.model_dump(), **changes}


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_unit_norm_rows_gives_each_unit_unit_norm_and_zero_bias():
    layer = unit_norm_rows_(nn.Linear(784, 128))
    torch.testing.assert_close(layer.weight.norm(dim=1), torch.ones(128))
    assert torch.count_nonzero(layer.bias) == 0


def test_unit_norm_filters_for_convolutions():
    conv = unit_norm_rows_(nn.Conv2d(3, 32, 3))
    torch.testing.assert_close(conv.weight.flatten(1).norm(dim=1), torch.ones(32))


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


# kind, model block, input shape, outputs, expected parameter count (computed by hand where noted)
MODELS = [
    ("mlp", {"kind": "mlp", "depth": 5, "width": 2048}, (286,), 39,
     286 * 2048 + 2048 + 4 * (2048 * 2048 + 2048) + 2048 * 39 + 39),  # TIMIT 5 × 2048
    ("autoencoder", {"kind": "autoencoder", "hidden": [1000, 500, 250, 30]}, (784,), 0,
     2 * (784 * 1000 + 1000 * 500 + 500 * 250 + 250 * 30) + (1000 + 500 + 250 + 30) + (250 + 500 + 1000 + 784)),
    ("window_tagger", {"kind": "window_tagger", "embedding_dim": 50, "depth": 2, "width": 256}, (3,), 25,
     100 * 50 + 150 * 256 + 256 + 256 * 256 + 256 + 256 * 25 + 25),
    ("cifar_shallow", {"kind": "cifar_shallow", "width": 96, "input_noise": 0.15}, (3, 32, 32), 10, None),
    ("cifar_small", {"kind": "cifar_small", "init": "unit_norm_rows"}, (3, 32, 32), 10,
     (3 * 9 * 32 + 32) + (32 * 9 * 32 + 32) + (32 * 9 * 64 + 64) + (64 * 9 * 64 + 64)
     + 64 * 8 * 8 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10),
    ("elu_cifar_11", spec_model("elu_cifar100_11layer"), (3, 32, 32), 100, None),
    ("elu_cifar_18", spec_model("elu_cifar_18layer", width_scale=0.1), (3, 32, 32), 100, None),
    ("elu_imagenet", spec_model("elu_imagenet", width_scale=0.05, fc=[64, 64]), (3, 64, 64), 1000, None),
    ("wide_resnet", {"kind": "wide_resnet", "depth": 40, "widen_factor": 4, "init": "he"}, (3, 32, 32), 100, None),
]


@pytest.mark.parametrize("kind, block, shape, n_out, expected", MODELS, ids=[m[0] for m in MODELS])
def test_shapes_parameters_and_one_optimisation_step(kind, block, shape, n_out, expected):
    torch.manual_seed(0)
    model = build_model(block, shape, n_out, "gelu", 0.1, vocab_size=100)
    x = torch.randint(0, 100, (4, *shape)) if kind == "window_tagger" else torch.randn(4, *shape)
    out = model(x)
    if kind == "autoencoder":
        assert out.shape == (4, 784)
        loss = nn.functional.mse_loss(out, x)
    else:
        assert out.shape == (4, n_out)
        loss = nn.functional.cross_entropy(out, torch.randint(0, n_out, (4,)))
    if expected is not None:
        assert n_params(model) == expected
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_wrn_40_4_has_about_8_9_million_parameters():
    model = build_model({"kind": "wide_resnet", "depth": 40, "widen_factor": 4, "init": "he"}, (3, 32, 32), 100,
                        "relu", 0.3)
    assert 8.8e6 < n_params(model) < 9.0e6
    blocks = [m for m in model.modules() if type(m).__name__ == "WideBlock"]
    assert len(blocks) == 18  # (40 - 4) / 6 = 6 blocks per group, 3 groups
    kinds = [type(m).__name__ for m in blocks[0].body]
    assert kinds == ["Conv2d", "Activation", "Dropout", "Conv2d", "Activation", "BatchNorm2d"]  # Conv-Act-Conv-Act-BN


@pytest.mark.parametrize("name, convs, widths", [
    ("elu_cifar100_11layer", 11, [192, 192, 240, 240, 260, 260, 280, 280, 300, 300, 100]),
    ("elu_cifar_18layer", 18, [384, 384, 640, 640, 640, 768, 768, 768, 768, 896, 896, 896, 1024, 1024, 1024, 1152,
                               1152, 100]),
])
def test_elu_paper_convnets_have_their_layers_as_the_spec_gives_them(name, convs, widths):
    model = build_model(spec_model(name), (3, 32, 32), 100, "elu", 0.0)
    layers = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(layers) == convs and [c.out_channels for c in layers] == widths
    assert sum(isinstance(m, nn.MaxPool2d) for m in model.modules()) == 7  # a pool after each stack
    # dropout after each stack's last layer at the stack's rate: (0, .1, .2, .3, .4, .5) for the six stacks
    assert [[d.p for d in stack] for stack in model.dropouts][-1] == []  # the read-out stack has none
    assert [stack[-1].p for stack in model.dropouts[:-1]] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert all(d.p == 0 for stack in model.dropouts for d in stack[:-1])


def test_fine_tuning_moves_dropout_to_every_layer_of_a_stack_and_scales_it():
    model = build_model(spec_model("elu_cifar_18layer", width_scale=0.05), (3, 32, 32), 10, "elu", 0.0)
    model.set_dropout("every_layer", 1.0)
    assert [d.p for d in model.dropouts[1]] == [0.1] * 3 and [d.p for d in model.dropouts[5]] == [0.5] * 3
    model.set_dropout("every_layer", 1.5)
    assert [d.p for d in model.dropouts[2]] == pytest.approx([0.3] * 4)
    assert [d.p for d in model.dropouts[5]] == pytest.approx([0.75] * 3)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)  # CIFAR-10: the read-out takes the classes


def test_elu_imagenet_network_has_15_layers_and_a_spatial_pyramid():
    model = build_model(spec_model("elu_imagenet"), (3, 256, 256), 1000, "elu", 0.0)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert len(convs) + len(linears) == 15
    assert [(c.out_channels, c.kernel_size[0]) for c in convs] == [(96, 6)] + [(512, 3)] * 3 + [(768, 3)] * 5 + [
        (1024, 3)] * 3
    # 3-level pyramid (1 + 4 + 16 bins) of 1024 channels, then 4096, 4096, 1000
    assert [(m.in_features, m.out_features) for m in linears] == [(21 * 1024, 4096), (4096, 4096), (4096, 1000)]
    assert sorted({d.p for d in model.modules() if isinstance(d, nn.Dropout) and d.p}) == [0.5]
    model.eval()
    with torch.no_grad():  # any image size: the pyramid fixes the width of the first fully connected layer
        assert model(torch.randn(1, 3, 128, 128)).shape == model(torch.randn(1, 3, 96, 96)).shape == (1, 1000)


def test_shallow_cifar_net_follows_table_1():
    model = build_model({"kind": "cifar_shallow", "width": 96, "input_noise": 0.15}, (3, 32, 32), 10, "gelu", 0.5)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size[0]) for c in convs] == [(96, 3)] * 3 + [(192, 3)] * 4 + [(192, 1)] * 2
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 9
    noise = model.net[0]
    x = torch.zeros(2, 3, 32, 32)
    assert torch.equal(noise.eval()(x), x) and noise.train()(x).std() == pytest.approx(0.15, rel=0.1)
