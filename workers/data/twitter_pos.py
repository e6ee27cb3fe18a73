"""Twitter part-of-speech tagging (GELU paper §3.3): the CoNLL files of Owoputi et al. (2013),
oct27 train / dev / test (1000 / 327 / 500 tweets, 25 tags), in ``DATA_DIR/twpos``.

Each example is a window of token ids: the word and its left and right neighbours (padding at the
tweet's edges). Words are lower-cased; words seen fewer than ``min_count`` times in training map
to <unk>. The paper's pretrained 50-d tweet embeddings are not available: the tagger learns its
embedding table, or starts from a user's word2vec text file (``data_options.embeddings``).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from workers.data.splits import DatasetNotFound, Splits

TAGS = tuple("!#$&,@ADEGLMNOPRSTUVXYZ^~")
PAD, UNK = "<pad>", "<unk>"
FILES = {"train": "oct27.train", "val": "oct27.dev", "test": "oct27.test"}


def read_conll(path: Path) -> list[list[tuple[str, str]]]:
    """Tweets as lists of (word, tag); a blank line ends a tweet."""
    tweets, current = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            if current:
                tweets.append(current)
            current = []
            continue
        word, tag = line.split("\t")[:2]
        current.append((word, tag))
    if current:
        tweets.append(current)
    return tweets


def windows(tweets, index: dict[str, int], width: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Token-id windows of ``2 * width + 1`` words around every word, and the word's tag id."""
    tag_id = {t: i for i, t in enumerate(TAGS)}
    xs, ys = [], []
    for tweet in tweets:
        ids = [index[PAD]] * width + [index.get(w.lower(), index[UNK]) for w, _ in tweet] + [index[PAD]] * width
        for i, (_, tag) in enumerate(tweet):
            xs.append(ids[i:i + 2 * width + 1])
            ys.append(tag_id[tag])
    return np.asarray(xs, dtype=np.int64), np.asarray(ys, dtype=np.int64)


def read_word2vec_text(path: Path, vocab: list[str], dim: int, seed: int = 0) -> np.ndarray:
    """A table for ``vocab`` from a word2vec text file; words it lacks get small random rows."""
    table = np.random.default_rng(seed).normal(0, 0.1, (len(vocab), dim)).astype(np.float32)
    position = {w: i for i, w in enumerate(vocab)}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip().split(" ")
            if len(parts) == dim + 1 and parts[0].lower() in position:
                table[position[parts[0].lower()]] = np.asarray(parts[1:], dtype=np.float32)
    return table


def load_twitter_pos(data_dir: Path, download: bool, val_size: int, train_subset: int | None,
                     options: dict) -> Splits:
    """oct27 train / dev / test (dev is the validation set: ``val_size`` is unused)."""
    folder = data_dir / "twpos"
    missing = [f for f in FILES.values() if not (folder / f).is_file()]
    if missing:
        raise DatasetNotFound(
            f"dataset: twitter_pos not found: looked in {folder} for {', '.join(missing)}. Put the oct27 "
            f"CoNLL files of the CMU Twitter POS data (Owoputi et al. 2013) there, or set ACTSWEEP_DATA_DIR")
    tweets = {split: read_conll(folder / name) for split, name in FILES.items()}
    if train_subset is not None:
        tweets["train"] = tweets["train"][:train_subset]  # counted in tweets
    counts = Counter(w.lower() for tweet in tweets["train"] for w, _ in tweet)
    vocab = [PAD, UNK] + sorted(w for w, c in counts.items() if c >= options.get("min_count", 1))
    index = {w: i for i, w in enumerate(vocab)}
    (train_x, train_y), (val_x, val_y), (test_x, test_y) = (windows(tweets[s], index) for s in ("train", "val", "test"))
    embeddings = None
    if options.get("embeddings"):
        path = Path(options["embeddings"]).expanduser()  # relative: to the data directory
        embeddings = read_word2vec_text(path if path.is_absolute() else data_dir / path, vocab,
                                        options.get("embedding_dim", 50))
    return Splits("twitter_pos", str(folder), train_x, train_y, val_x, val_y, test_x, test_y,
                  n_classes=len(TAGS), vocab=vocab, embeddings=embeddings)
