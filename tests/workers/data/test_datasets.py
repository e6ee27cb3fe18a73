import numpy as np
import pytest

from tests.conftest import make_cifar, make_imagenet, make_timit
from workers.data import DatasetNotFound, load_dataset
from workers.data.twitter_pos import TAGS


def test_twitter_pos_windows_from_the_conll_files(twpos):
    splits = load_dataset("twitter_pos", twpos, download=False, val_size=1)
    assert splits.n_classes == 25 == len(TAGS)
    assert splits.in_shape == (3,) and splits.train_x.dtype == np.int64
    # oct27: 1000 / 327 / 500 tweets; one example per token
    assert splits.sizes() == {"train": 14619, "val": 4823, "test": 7152}
    pad = splits.vocab.index("<pad>")
    assert splits.train_x[0, 0] == pad  # the first word of a tweet has no left neighbour
    first_word = splits.vocab[splits.train_x[0, 1]]
    assert first_word == "i" and TAGS[splits.train_y[0]] == "O"  # "I	O" is the first line of oct27.train


def test_twitter_pos_loads_a_word2vec_text_table(tmp_path, twpos):
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("i " + " ".join(["0.5"] * 4) + "\npredict " + " ".join(["-1"] * 4) + "\n")
    splits = load_dataset("twitter_pos", twpos, False, 1, options={"embeddings": str(vectors), "embedding_dim": 4})
    assert splits.embeddings.shape == (len(splits.vocab), 4)
    np.testing.assert_array_equal(splits.embeddings[splits.vocab.index("i")], [0.5] * 4)


@pytest.mark.parametrize("name, classes", [("cifar10", 10), ("cifar100", 100)])
def test_cifar_from_the_pickle_layout(tmp_path, name, classes):
    make_cifar(tmp_path, name)
    splits = load_dataset(name, tmp_path, download=False, val_size=200, options={"gcn": True, "zca": True})
    assert splits.in_shape == (3, 32, 32) and splits.n_classes == classes
    assert splits.sizes() == {"train": 800, "val": 200, "test": 100}


def test_timit_from_the_documented_file(tmp_path):
    make_timit(tmp_path)
    splits = load_dataset("timit", tmp_path, download=False, val_size=1)
    assert splits.in_shape == (286,) and splits.n_classes == 39 and splits.sizes()["train"] == 600


@pytest.mark.parametrize("name, where, how", [
    ("cifar10", "cifar-10-batches-py", "python pickle layout"),
    ("cifar100", "cifar-100-python", "python pickle layout"),
    ("timit", "timit/timit_frames.npz", "licensed"),
    ("twitter_pos", "twpos", "oct27"),
])
def test_missing_data_names_the_directory_and_how_to_provide_it(tmp_path, name, where, how):
    with pytest.raises(DatasetNotFound, match=f"{name} not found: looked .*{tmp_path}/{where}.*{how}"):
        load_dataset(name, tmp_path, download=False, val_size=100)


def test_a_failed_cifar_download_is_named_not_swallowed(tmp_path, monkeypatch):
    from torchvision import datasets

    from service.local_servers import free_port

    # the fault, injected: the archive's address answers nothing (here, and on a machine with the internet)
    monkeypatch.setattr(datasets.CIFAR10, "url", f"http://127.0.0.1:{free_port()}/cifar-10-python.tar.gz")
    with pytest.raises(DatasetNotFound, match=r"cifar10 not found: .*download failed \((URLError|ConnectionRefusedError)"):
        load_dataset("cifar10", tmp_path, download=True, val_size=100)


def test_cifar_with_no_validation_split_trains_on_all_of_it(tmp_path):
    make_cifar(tmp_path, "cifar100", per_batch=40, test=20)
    splits = load_dataset("cifar100", tmp_path, download=False, val_size=0, options={"gcn": True, "zca": True})
    assert splits.sizes() == {"train": 200, "val": 0, "test": 20}


def test_imagenet_from_an_image_folder_reads_batches_on_demand(tmp_path):
    import torch

    make_imagenet(tmp_path)
    splits = load_dataset("imagenet", tmp_path, download=False, val_size=3, options={"image_size": 40, "crop": 32})
    assert splits.sizes() == {"train": 15, "val": 3, "test": 9} and splits.n_classes == 3
    batch = splits.train_x.read_rows(torch.tensor([0, 4, 2]))
    assert batch.shape == (3, 3, 40, 40) and batch.dtype == torch.float32 and 0 <= batch.min() <= batch.max() <= 1
    assert splits.test_x.read_rows(slice(0, 5)).shape == (5, 3, 32, 32)  # evaluation: the central crop
    with pytest.raises(DatasetNotFound, match="imagenet not found: looked in .*ImageFolder layout"):
        load_dataset("imagenet", tmp_path / "nothing", download=False, val_size=0)


def test_a_tiny_imagenet_run_trains_the_15_layer_network(tmp_path):
    from search_spaces import load_spec
    from workers.train import train_epochs
    from workers.trial import TrialConfig

    make_imagenet(tmp_path, per_class=8)
    spec = load_spec("elu_imagenet", quick=True)
    splits = load_dataset("imagenet", tmp_path, False, spec.val_size, options=spec.data_options.model_dump())
    config = TrialConfig.from_config({**spec.trial_base(), "activation": "elu", "lr": 0.01, "dropout": 0.0, "seed": 0,
                                      "epochs": 2})
    history = list(train_epochs(config, splits))
    assert [m["epoch"] for m in history] == [1, 2] and all(m["diverged"] == 0 for m in history)
    assert 0 <= history[-1]["test_error_top5"] <= history[-1]["test_error"] <= 1
    assert "train_loss_eval" not in history[-1]  # eval_train off: the training set is not re-measured


def _idx(path, array, magic_type=8):
    import gzip

    header = bytes([0, 0, magic_type, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_fashion_mnist_from_idx_files_in_torchvisions_layout(tmp_path):
    """MNIST's IDX format (the layout torchvision and Debian's dataset-fashion-mnist use), k/255."""
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 256, (120, 28, 28)), rng.integers(0, 10, 120)
    for stem, array in (("train-images-idx3-ubyte", images[:100]), ("train-labels-idx1-ubyte", labels[:100]),
                        ("t10k-images-idx3-ubyte", images[100:]), ("t10k-labels-idx1-ubyte", labels[100:])):
        _idx(raw / f"{stem}.gz", array)
    splits = load_dataset("fashion_mnist", tmp_path, download=False, val_size=10)
    assert splits.sizes() == {"train": 90, "val": 10, "test": 20} and splits.source == str(raw)
    np.testing.assert_allclose(splits.test_x, images[100:].reshape(20, -1) / 255.0, rtol=1e-6)
    assert sorted(np.concatenate([splits.train_y, splits.val_y]).tolist()) == sorted(labels[:100].tolist())


def test_fashion_mnist_from_the_debian_package(tmp_path):
    import os
    from pathlib import Path

    if not Path("/usr/share/datasets/fashion-mnist").is_dir():
        if os.environ.get("ACTSWEEP_REQUIRE_FASHION_MNIST"):  # CI: make test installs it, so it must be there
            pytest.fail("Debian's dataset-fashion-mnist is not installed")
        pytest.skip("Debian's dataset-fashion-mnist is not installed (make test installs it where it may)")
    splits = load_dataset("fashion_mnist", tmp_path, download=False, val_size=5000)
    assert splits.sizes() == {"train": 55000, "val": 5000, "test": 10000}
    assert splits.n_classes == 10 and 0.0 <= splits.train_x.min() and splits.train_x.max() == 1.0
