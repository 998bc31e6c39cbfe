"""Neural networks in client actors (clustered federated learning, Mehta & Shao 2023).

This package is split so that *checking* a configuration never imports torch:

* :mod:`fedray.nn` (this module, torch-free) — the catalogue of model names and
  what data they accept (:func:`check_model`, :func:`resolve_model_name`), and
  :func:`model_spec`, the small picklable description of a model that travels
  with tasks;
* :mod:`fedray.nn.split` (torch-free) — each client's own 85/15 train/test split
  (:func:`~fedray.nn.split.client_split`), shared by every supervised method;
* :mod:`fedray.nn.models` (torch) — the networks and ``build_model``;
* :mod:`fedray.nn.train` (torch) — the one training loop of the project
  (``fit``), supervised ``train`` / ``evaluate``, flat weights, device and threads.

Model names (``algorithm.params.model``):

==========  =================================================================
``cnn28``   the paper's CNN for 28x28 images: two 5x5 conv layers (32, 64
            channels), each followed by 2x2 max pooling, a 512-unit dense layer
``cnn32``   the same CNN on 32x32 colour images (the paper's CIFAR-10 network):
            3 input channels, 4096 features into the dense layer
``cnn8``    a small CNN for 8x8 digits: one 3x3 conv layer (16 channels),
            2x2 max pooling, a 64-unit dense layer
``mlp``     a multilayer perceptron for tabular data (or flattened images)
``cnn1d``   the paper's 1-D CNN for signals (Section VI): three conv layers
            (64, 128, 256 filters of size 5) with max pooling, dense 128 and 64
``auto``    ``cnn32`` for colour images of 32 pixels or more a side, ``cnn28`` for
            other images of 16 pixels or more, ``cnn8`` for smaller images,
            ``mlp`` for tabular data
==========  =================================================================

Every network ends in a dense head with one output per class of the data set:
10 for MNIST and CIFAR-10, 62 for FEMNIST and EMNIST byclass, 52 for their
letters (``data.options.classes: letters``), 47 for EMNIST balanced, 49 for
Kuzushiji-49.

A user's model: ``algorithm.params.model: package.module:function``, where
``function(input_shape, n_classes) -> torch.nn.Module`` takes the shape of one
sample (e.g. ``(1, 8, 8)``) and returns a module mapping a batch
``(b, *input_shape)`` to logits ``(b, n_classes)``. It is imported where the model
is built (the server draws theta_0 from it; every client process builds its own
copy), under the same seed as the built-in models. :func:`resolve_model_factory`
checks the reference without torch; :func:`fedray.nn.models.build_model` checks
what the function returns.

Algorithm modules import only this module at import time and import
:mod:`fedray.nn.train` inside client functions.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from fedray.core.errors import ConfigError
from fedray.core.plugins import load_reference

_REFERENCE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")

#: name -> kind of input it accepts: "image" (C, H, W), "signal" (C, L) or (L,), "any".
MODEL_KINDS: dict[str, str] = {"cnn28": "image", "cnn32": "image", "cnn8": "image", "mlp": "any", "cnn1d": "signal"}
#: One line on each model (``fedray describe NAME``; no torch needed to read it).
MODEL_DESCRIPTIONS: dict[str, str] = {
    "cnn28": "images of 16 px and more (the papers' MNIST network): two 5x5 convolutions (32, 64 channels), 2x2 "
             "max pooling after each, dense 512",
    "cnn32": "32x32 colour images (the FLACC paper's CIFAR-10 network): cnn28's layers on 3 input channels, 64 x 8 x 8 "
             "= 4096 features into the dense 512; the head has one output per class",
    "cnn8": "small images such as the 8x8 digits: one 3x3 convolution (16 channels), 2x2 max pooling, dense 64",
    "mlp": "any input, flattened: two dense layers of 64 units with ReLU",
    "cnn1d": "signals (C, L) or (L,): three 1-D convolutions (64, 128, 256 filters of size 5) with max pooling, "
             "dense 128 and 64 (the FLACC paper's network for vibration signals)",
    "auto": "picked by the data's sample shape: cnn32 for colour (3-channel) images of 32 px and more, cnn28 for "
            "other images of 16 px and more, cnn8 for smaller images, mlp otherwise; the head has one output per "
            "class of the data (10, 62 for FEMNIST, 52 for its letters...)",
}


def available_models() -> list[str]:
    """Registered model names (plus ``auto``)."""
    return sorted(MODEL_KINDS) + ["auto"]


def is_model_reference(name: str) -> bool:
    """Whether ``name`` names a user's model factory (``package.module:function``)."""
    return ":" in name


def check_reference_syntax(name: str, key: str = "algorithm.params.model") -> None:
    """Raise :class:`ConfigError` unless ``name`` reads ``package.module:function``."""
    if not _REFERENCE.match(name):
        raise ConfigError(f"{key}: {name!r} is not a model reference; write 'package.module:function' "
                          f"(a function (input_shape, n_classes) -> torch.nn.Module) or one of "
                          f"{', '.join(available_models())}")


def resolve_model_factory(name: str, key: str = "algorithm.params.model") -> Callable[..., Any]:
    """Import the model factory ``package.module:function`` (no torch unless the module imports it).

    Raises
    ------
    ConfigError
        One line: bad syntax, module not found (or failing to import), attribute
        missing, or not callable.
    """

    check_reference_syntax(name, key)
    obj = load_reference(name, key)
    if not callable(obj):
        raise ConfigError(f"{key}: {name!r} is not callable (got {type(obj).__name__}); it must be a function "
                          "(input_shape, n_classes) -> torch.nn.Module")
    return obj


def sample_kind(sample_shape: tuple[int, ...]) -> str:
    """``"image"`` for (C, H, W) or (H, W) samples, ``"tabular"`` for (d,), else ``"other"``."""
    if len(sample_shape) in (2, 3):
        return "image"
    if len(sample_shape) == 1:
        return "tabular"
    return "other"


def resolve_model_name(name: str, sample_shape: tuple[int, ...]) -> str:
    """The concrete model for ``name`` (``auto`` picks by sample shape)."""
    if name != "auto":
        return name
    if sample_kind(sample_shape) == "image":
        if len(sample_shape) == 3 and sample_shape[0] == 3 and min(sample_shape[-2:]) >= 32:
            return "cnn32"
        return "cnn28" if min(sample_shape[-2:]) >= 16 else "cnn8"
    return "mlp"


def check_model(name: str, sample_shape: tuple[int, ...], n_classes: int | None = None,
                key: str = "algorithm.params.model") -> str:
    """Check that model ``name`` can learn from samples of ``sample_shape``; return the concrete name.

    Raises
    ------
    ConfigError
        For an unknown name, an image model on tabular data, a 1-D CNN on images,
        or data without labels; for a reference ``package.module:function``, when it
        cannot be imported or is not callable (what it returns is checked where the
        model is built).
    """
    if is_model_reference(name):
        resolve_model_factory(name, key)
        if n_classes is not None and n_classes < 2:
            raise ConfigError(f"{key}: a classifier needs at least 2 classes; the data have {n_classes}")
        return name
    concrete = resolve_model_name(name, tuple(sample_shape))
    if concrete not in MODEL_KINDS:
        raise ConfigError(f"{key}: unknown model {name!r}; choose one of {', '.join(available_models())}")
    kind = MODEL_KINDS[concrete]
    have = sample_kind(tuple(sample_shape))
    if kind == "image" and have != "image":
        raise ConfigError(
            f"{key}: {concrete!r} is an image model but the data are tabular (sample shape {tuple(sample_shape)}); "
            "use 'mlp' (or 'cnn1d' for signals), or a data set of images")
    if kind == "image" and min(sample_shape[-2:]) < 4:
        raise ConfigError(
            f"{key}: {concrete!r} needs images of at least 4x4 pixels; got sample shape {tuple(sample_shape)}"
        )
    if kind == "signal":
        if have == "image" and len(sample_shape) == 3:
            raise ConfigError(f"{key}: 'cnn1d' is a model for 1-D signals; the data are images "
                              f"(sample shape {tuple(sample_shape)}); use 'cnn28' or 'cnn8'")
        if sample_shape[-1] < 8:
            raise ConfigError(f"{key}: 'cnn1d' needs signals of length >= 8; got sample shape {tuple(sample_shape)}")
    if n_classes is not None and n_classes < 2:
        raise ConfigError(f"{key}: a classifier needs at least 2 classes; the data have {n_classes}")
    return concrete


def model_spec(name: str, sample_shape: tuple[int, ...], n_classes: int | None, seed: int) -> dict[str, Any]:
    """The picklable description of a model that travels with tasks.

    Returns
    -------
    dict
        ``{"name", "sample_shape", "n_classes", "seed"}``; ``build_model(**spec)``
        in :mod:`fedray.nn.models` builds it.
    """
    if n_classes is None:
        raise ConfigError("data: supervised learning needs labels; the data set has none (set data.label_column)")
    concrete = check_model(name, tuple(sample_shape), n_classes)
    return {"name": concrete, "sample_shape": tuple(int(s) for s in sample_shape), "n_classes": int(n_classes),
            "seed": int(seed)}


__all__ = ["MODEL_DESCRIPTIONS", "MODEL_KINDS", "available_models", "check_model", "check_reference_syntax",
           "is_model_reference", "model_spec", "resolve_model_factory", "resolve_model_name", "sample_kind"]
