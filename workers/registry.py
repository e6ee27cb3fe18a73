"""What a spec may name: model kinds and datasets, each a name → builder table (activations, which
have parameters and expressions too, are workers.activation_defs).

A builder is named ``"module:attribute"`` and imported on first use, so the tables (and the spec
schema that validates against them) load without torch. Adding a dataset or a model is one file
(its builder) plus one line here; the accepted names in every error message come from these tables.
"""
from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from typing import Any, Callable


def did_you_mean(name: str, accepted: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the accepted name closest to ``name`` (difflib's ratio ≥ 0.8), or
    ``""`` where none is that close: a typo's likely fix beside every list of what is accepted."""
    close = difflib.get_close_matches(str(name), list(accepted), n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


class Registry:
    """Names of one kind of thing and where each one's builder lives."""

    def __init__(self, field: str, entries: dict[str, str]):
        self.field = field  # the spec field that names them, for error messages
        self._entries = dict(entries)
        self._loaded: dict[str, Callable[..., Any]] = {}

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def unknown(self, name: str) -> ValueError:
        return ValueError(f"{self.field}: unknown {name!r}{did_you_mean(name, self._entries)}; "
                          f"accepted: {', '.join(self._entries)}")

    def get(self, name: str) -> Callable[..., Any]:
        """The builder registered as ``name`` (imported now if it was not yet)."""
        if name not in self._entries:
            raise self.unknown(name)
        if name not in self._loaded:
            module, _, attribute = self._entries[name].partition(":")
            self._loaded[name] = getattr(importlib.import_module(module), attribute)
        return self._loaded[name]


# activations: workers.activation_defs (families with parameters, expressions, plugins)

# model.kind → build(model block, in_shape, n_out, activation, dropout, vocab_size) (workers.models)
MODELS = Registry("model.kind", {
    "mlp": "workers.models:build_mlp",
    "autoencoder": "workers.models:build_autoencoder",
    "window_tagger": "workers.models:build_window_tagger",
    "cifar_shallow": "workers.models:build_cifar_shallow",
    "cifar_small": "workers.models:build_cifar_small",
    "stacked_conv": "workers.models:build_stacked_conv",
    "wide_resnet": "workers.models:build_wide_resnet",
})
FUSABLE_MODELS = ("mlp", "autoencoder")  # kinds a fused pack can stack (workers.fused)

# dataset → load(data_dir, download, val_size, train_subset, options) → Splits (workers.data)
DATASETS = Registry("dataset", {
    "mnist": "workers.data.mnist:load_mnist",
    "fashion_mnist": "workers.data.fashion_mnist:load_fashion_mnist",
    "digits": "workers.data.digits:load_digits",
    "cifar10": "workers.data.cifar:load_cifar10",
    "cifar100": "workers.data.cifar:load_cifar100",
    "twitter_pos": "workers.data.twitter_pos:load_twitter_pos",
    "timit": "workers.data.timit:load_timit",
    "imagenet": "workers.data.imagenet:load_imagenet",
})
OWN_VALIDATION = ("twitter_pos", "timit")  # datasets that come with their own validation split
