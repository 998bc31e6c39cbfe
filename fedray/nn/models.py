"""The networks of clustered federated learning (Mehta & Shao 2023, Sections V-B and VI).

``build_model(name, sample_shape, n_classes, seed)`` builds a model by name; its
initial weights depend only on ``seed`` (drawn inside :func:`torch.random.fork_rng`,
so the caller's global torch generator is left untouched). Every model takes a
batch of shape ``(batch, *sample_shape)`` and returns logits of shape
``(batch, n_classes)``; ``model.sample_shape`` records the input shape.

Add a model with :func:`register_model` (and an entry in
:data:`fedray.nn.MODEL_KINDS` so configurations can be checked without torch).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from fedray.core.errors import ConfigError
from fedray.core.registry import Registry
from fedray.nn import (
    MODEL_KINDS,
    check_model,
    is_model_reference,
    resolve_model_factory,
)

Builder = Callable[[tuple[int, ...], int], nn.Module]
#: Built-in networks: ``fn(sample_shape, n_classes) -> nn.Module``.
MODELS: Registry[Builder] = Registry("model")


def register_model(name: str, kind: str = "any") -> Callable[[Builder], Builder]:
    """Register ``fn(sample_shape, n_classes) -> nn.Module`` under ``name``.

    ``kind`` is the input the model accepts: ``"image"``, ``"signal"`` or ``"any"``.
    """

    def deco(fn: Builder) -> Builder:
        MODELS.register(name, fn)
        MODEL_KINDS.setdefault(name, kind)
        return fn

    return deco


def _image_shape(sample_shape: tuple[int, ...]) -> tuple[int, int, int]:
    return (1, *sample_shape) if len(sample_shape) == 2 else tuple(sample_shape)  # type: ignore[return-value]


class Reshape(nn.Module):
    """Flat rows (B, d) to samples (B, *shape): the first layer of the built-in networks (the stacked
    forward of :mod:`fedray.nn.stacked` knows it)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.shape)


def _flat_size(features: nn.Module, shape: tuple[int, ...]) -> int:
    with torch.no_grad():
        return int(features(torch.zeros(1, *shape)).numel())


@register_model("cnn28", "image")
def cnn28(sample_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """Two 5x5 convolutions (32, 64 channels, 'same' padding), 2x2 max pooling after each, dense 512."""
    shape = _image_shape(sample_shape)
    features = nn.Sequential(
        Reshape(shape),
        nn.Conv2d(shape[0], 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
    )
    d = _flat_size(features, shape)
    return nn.Sequential(features, nn.Linear(d, 512), nn.ReLU(), nn.Linear(512, n_classes))


@register_model("cnn32", "image")
def cnn32(sample_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """The FLACC paper's CNN on 32x32 colour images (CIFAR-10, Section V-B): the layers of :func:`cnn28`
    (5x5 convolutions of 32 and 64 channels, 'same' padding, 2x2 max pooling after each, dense 512) on 3 input
    channels, so a flattened 64 x 8 x 8 = 4096 features feed the dense layer."""
    return cnn28(sample_shape, n_classes)


@register_model("cnn8", "image")
def cnn8(sample_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """One 3x3 convolution (16 channels, 'same' padding), 2x2 max pooling, dense 64 (for 8x8 digits).

    Small on purpose: a client's five local epochs cost about 0.1 s on one CPU core.
    """
    shape = _image_shape(sample_shape)
    features = nn.Sequential(
        Reshape(shape),
        nn.Conv2d(shape[0], 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
    )
    d = _flat_size(features, shape)
    return nn.Sequential(features, nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, n_classes))


@register_model("mlp", "any")
def mlp(sample_shape: tuple[int, ...], n_classes: int, hidden: tuple[int, ...] = (64, 64)) -> nn.Module:
    """Fully connected layers with ReLU on the flattened sample."""
    d = int(math.prod(sample_shape))
    layers: list[nn.Module] = [nn.Flatten()]
    for h in hidden:
        layers += [nn.Linear(d, h), nn.ReLU()]
        d = h
    layers.append(nn.Linear(d, n_classes))
    return nn.Sequential(*layers)


@register_model("cnn1d", "signal")
def cnn1d(sample_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """Three 1-D convolutions (64, 128, 256 filters of size 5, 'same' padding) each with ReLU and
    max pooling by 2, then dense 128 and 64 with ReLU (the paper's network for vibration signals)."""
    shape = (1, sample_shape[0]) if len(sample_shape) == 1 else tuple(sample_shape)
    features = nn.Sequential(
        Reshape(shape),
        nn.Conv1d(shape[0], 64, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(64, 128, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(128, 256, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Flatten(),
    )
    d = _flat_size(features, shape)
    return nn.Sequential(features, nn.Linear(d, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                         nn.Linear(64, n_classes))


def build_model(name: str, sample_shape: tuple[int, ...], n_classes: int, seed: int) -> nn.Module:
    """Build model ``name`` for samples of ``sample_shape`` and ``n_classes`` outputs.

    Parameters
    ----------
    name : str
        One of :func:`fedray.nn.available_models` (``auto`` picks by shape), or a
        user's factory ``package.module:function`` (see :func:`check_factory_model`).
    sample_shape : tuple of int
        Shape of one sample, e.g. ``(1, 8, 8)`` for digits, ``(d,)`` for tables.
    n_classes : int
    seed : int
        Initial weights depend on this seed only.

    Raises
    ------
    ConfigError
        Unknown name, or an image model on tabular data (see :func:`fedray.nn.check_model`);
        a factory that cannot be imported, does not return a module, or whose outputs are
        not ``(batch, n_classes)``.
    """
    sample_shape = tuple(int(s) for s in sample_shape)
    concrete = check_model(name, sample_shape, n_classes)
    if is_model_reference(concrete):
        factory = resolve_model_factory(concrete)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            try:
                model = factory(sample_shape, int(n_classes))
            except Exception as exc:  # noqa: BLE001 - the user's function failed
                raise ConfigError(
                    f"algorithm.params.model: {concrete!r} failed when called with "
                    f"({sample_shape}, {int(n_classes)}): {type(exc).__name__}: {_first_line(exc)}"
                ) from None
            check_factory_model(model, concrete, sample_shape, int(n_classes))
        model.sample_shape = sample_shape  # type: ignore[attr-defined]
        model.model_name = concrete  # type: ignore[attr-defined]
        return model
    if concrete not in MODELS:
        raise ConfigError(f"algorithm.params.model: model {concrete!r} has no builder in fedray.nn.models")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = MODELS[concrete](sample_shape, int(n_classes))
    model.sample_shape = sample_shape  # type: ignore[attr-defined]
    model.model_name = concrete  # type: ignore[attr-defined]
    return model


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def check_factory_model(model: object, name: str, sample_shape: tuple[int, ...], n_classes: int) -> None:
    """Check what a user's factory returned: a module with parameters whose outputs for a
    batch of shape ``(2, *sample_shape)`` have shape ``(2, n_classes)``.

    The probe runs in eval mode without gradient (no buffer or random state changes).

    Raises
    ------
    ConfigError
        One line naming the reference, what it returned and what is expected.
    """
    key = "algorithm.params.model"
    if not isinstance(model, nn.Module):
        raise ConfigError(f"{key}: {name!r} returned {type(model).__name__}, not a torch.nn.Module")
    if not any(True for _ in model.parameters()):
        raise ConfigError(f"{key}: {name!r} returned a module without trainable parameters")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(torch.zeros(2, *sample_shape))
    except Exception as exc:  # noqa: BLE001 - the user's forward failed
        raise ConfigError(f"{key}: {name!r} fails on a batch of shape {(2, *sample_shape)}: "
                          f"{type(exc).__name__}: {_first_line(exc)}") from None
    finally:
        model.train(was_training)
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else None
    if shape != (2, n_classes):
        got = f"outputs of shape {shape}" if shape is not None else f"{type(out).__name__} outputs"
        raise ConfigError(f"{key}: {name!r} returns {got} for a batch of shape {(2, *sample_shape)}; "
                          f"expected logits of shape (2, {n_classes}) (n_classes = {n_classes})")


def n_parameters(model: nn.Module) -> int:
    """Number of trainable scalars (the length of the flat weight vector)."""
    return int(sum(p.numel() for p in model.parameters()))
