"""The peers' models as fedray model factories (``algorithm.params.model: peer_models:NAME``).

A factory takes the shape of one sample ``(C, H, W)`` and the number of classes and returns a
``torch.nn.Module`` mapping a batch to logits ``(b, n_classes)``. The networks take the batch as
images ``(b, C, H, W)`` or as flat rows ``(b, C * H * W)`` (fedray's clients train on flat rows, as
its own image models expect). The Flower side of ``benchmarks/peers/run.py`` builds the same
modules, so both systems train the same parameters.

* ``logreg``: FLUTE's MNIST logistic regression (one linear layer on the flattened image).
* ``blazefl_cnn``: the CNN of BlazeFL's CIFAR-10 benchmark (PyTorch's CIFAR-10 tutorial network:
  two 5x5 convolutions of 6 and 16 channels with max pooling, then 120, 84 and the classes), the
  inputs normalised to [-1, 1] inside the module as their transform does.
* ``pfl_cnn``: pfl-research's ``simple_cnn`` for CIFAR-10 (two 3x3 convolutions of 32 and 64
  channels, max pooling, dropout 0.25, a dense layer of 128, dropout 0.5), Glorot-uniform weights.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def logreg(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    """Multinomial logistic regression: flatten, one linear layer (softmax in the loss)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), n_classes))


class AsImages(nn.Module):
    """Reshape a batch (flat rows or images) to images ``(b, *shape)``."""

    def __init__(self, shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.shape = tuple(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.shape)


class TutorialCNN(nn.Module):
    """PyTorch's CIFAR-10 tutorial network, as BlazeFL's benchmark uses it (inputs in [0, 1])."""

    def __init__(self, in_channels: int, side: int, n_classes: int) -> None:
        super().__init__()
        self.images = AsImages((in_channels, side, side))
        self.conv1 = nn.Conv2d(in_channels, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        flat = 16 * (((side - 4) // 2 - 4) // 2) ** 2
        self.fc1 = nn.Linear(flat, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (self.images(x) - 0.5) / 0.5  # their Normalize((0.5,) * 3, (0.5,) * 3)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def blazefl_cnn(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    c, h, _ = _image(input_shape)
    return TutorialCNN(c, h, n_classes)


def pfl_cnn(input_shape: tuple[int, ...], n_classes: int) -> nn.Module:
    c, h, _ = _image(input_shape)
    flat = ((h - 4) // 2) ** 2 * 64
    model = nn.Sequential(
        AsImages((c, h, h)), nn.Conv2d(c, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, n_classes))
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
    return model


def _image(input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(input_shape) != 3 or input_shape[1] != input_shape[2] or input_shape[1] < 12:
        raise ValueError(f"expected square images (C, H, W) of side >= 12; got input_shape {tuple(input_shape)}")
    return int(input_shape[0]), int(input_shape[1]), int(input_shape[2])
