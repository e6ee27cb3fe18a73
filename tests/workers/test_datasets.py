import numpy as np
import pytest

from tests.conftest import SHARED_TWPOS, make_cifar, make_timit, needs_twpos
from workers.datasets import DatasetNotFound, load_dataset
from workers.twitter_pos import TAGS


@needs_twpos
def test_twitter_pos_windows_from_the_conll_files():
    splits = load_dataset("twitter_pos", SHARED_TWPOS, download=False, val_size=1)
    assert splits.n_classes == 25 == len(TAGS)
    assert splits.in_shape == (3,) and splits.train_x.dtype == np.int64
    # oct27: 1000 / 327 / 500 tweets; one example per token
    assert splits.sizes() == {"train": 14619, "val": 4823, "test": 7152}
    pad = splits.vocab.index("<pad>")
    assert splits.train_x[0, 0] == pad  # the first word of a tweet has no left neighbour
    first_word = splits.vocab[splits.train_x[0, 1]]
    assert first_word == "i" and TAGS[splits.train_y[0]] == "O"  # "I	O" is the first line of oct27.train


@needs_twpos
def test_twitter_pos_loads_a_word2vec_text_table(tmp_path):
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("i " + " ".join(["0.5"] * 4) + "\npredict " + " ".join(["-1"] * 4) + "\n")
    splits = load_dataset("twitter_pos", SHARED_TWPOS, False, 1, options={"embeddings": str(vectors), "embedding_dim": 4})
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
