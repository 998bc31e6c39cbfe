"""The FLACC paper's CNN on 32x32 colour images, and heads sized by the data's classes (62, 52...)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fedray.nn import resolve_model_name  # noqa: E402
from fedray.nn.models import build_model, n_parameters  # noqa: E402


def _flacc_cnn_size(channels: int, side: int, n_classes: int) -> int:
    """Section V-B: 5x5 convolutions of 32 and 64 channels, 2x2 max pooling after each, dense 512, softmax head."""
    conv1 = channels * 32 * 25 + 32
    conv2 = 32 * 64 * 25 + 64
    flat = 64 * (side // 4) ** 2
    return conv1 + conv2 + flat * 512 + 512 + 512 * n_classes + n_classes


def test_auto_picks_the_papers_cnn_for_cifar_and_keeps_the_others():
    assert resolve_model_name("auto", (3, 32, 32)) == "cnn32"
    assert resolve_model_name("auto", (1, 28, 28)) == "cnn28"  # MNIST, FEMNIST, EMNIST: unchanged
    assert resolve_model_name("auto", (1, 8, 8)) == "cnn8"
    assert resolve_model_name("auto", (1, 32, 32)) == "cnn28"  # grey 32x32: not CIFAR's network


@pytest.mark.parametrize("shape,n_classes,name", [((3, 32, 32), 10, "cnn32"), ((1, 28, 28), 62, "cnn28"),
                                                  ((1, 28, 28), 52, "cnn28"), ((1, 28, 28), 49, "cnn28")])
def test_the_network_has_the_papers_layers_and_one_output_per_class(shape, n_classes, name):
    model = build_model("auto", shape, n_classes, seed=0)
    assert model.model_name == name
    assert n_parameters(model) == _flacc_cnn_size(shape[0], shape[-1], n_classes)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size) for c in convs] == [(shape[0], 32, (5, 5)),
                                                                               (32, 64, (5, 5))]
    out = model(torch.zeros(2, *shape))
    assert tuple(out.shape) == (2, n_classes)


def test_cnn32_draws_the_same_weights_as_cnn28_on_the_same_shape():
    """cnn32 names the paper's CIFAR-10 network; its layers and initial weights are cnn28's on 3 channels."""
    a = build_model("cnn32", (3, 32, 32), 10, seed=5)
    b = build_model("cnn28", (3, 32, 32), 10, seed=5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
