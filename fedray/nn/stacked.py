"""The written-out forward of C stacked copies of one network, for batched training.

This module holds the explicit stacked forward of :mod:`fedray.nn.batched`: :func:`flat_layers`
flattens a network into the layers it knows (linear layers, convolutions, max pooling,
flatten and reshape, element-wise activations, the autoencoder's ``decoder(relu(encoder(x)))``)
and moves a ReLU behind the max pooling that follows it; :func:`stacked_forward` runs the
C clients' copies (parameters ``params[name]``: (C, *shape)) on their stacked batches
(C, B, ...) as batched matrix products — narrow convolutions on their patches (im2col),
wide ones as one grouped convolution — with channels-last activations from a convolution
to the next dense layer; the input convolution's patches can be cut once for all rows
(:func:`input_conv`, :func:`input_patches`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from fedray.nn.autoencoder import Autoencoder
from fedray.nn.models import Reshape

#: Parameter-free layers that act on each value alone: applied to the stacked batch as they are.
_ELEMENTWISE = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.LeakyReLU, nn.ELU, nn.SiLU, nn.Identity)


def flat_layers(model: nn.Module) -> list[tuple[str, nn.Module]] | None:
    """The network as a flat list of ``(parameter prefix, layer)`` when every layer is one the
    explicit stacked forward knows (:func:`stacked_forward`), else None."""
    out: list[tuple[str, nn.Module]] = []

    def walk(prefix: str, m: nn.Module) -> bool:
        if type(m) is Autoencoder:  # decoder(relu(encoder(x)))
            if not walk(f"{prefix}encoder.", m.encoder):
                return False
            out.append((prefix, nn.ReLU()))
            return walk(f"{prefix}decoder.", m.decoder)
        if type(m) is nn.Sequential:
            return all(walk(f"{prefix}{name}.", child) for name, child in m.named_children())
        if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d)) and type(m) in (nn.Linear, nn.Conv1d, nn.Conv2d):
            if isinstance(m, nn.Linear) or (m.groups == 1 and m.padding_mode == "zeros"
                                            and not isinstance(m.padding, str)):
                out.append((prefix, m))
                return True
            return False
        if type(m) in (nn.MaxPool1d, nn.MaxPool2d) and not m.return_indices:
            out.append((prefix, m))
            return True
        if (type(m) is nn.Flatten and m.start_dim == 1 and m.end_dim == -1) or type(m) is Reshape \
                or type(m) in _ELEMENTWISE:
            out.append((prefix, m))
            return True
        return False

    if not walk("", model):
        return None
    # max(relu(h)) = relu(max(h)) over any window, with the same gradient (the first maximum gets it,
    # and relu passes nothing where the maximum is <= 0): pool first, on fewer values
    for i in range(len(out) - 1):
        if type(out[i][1]) is nn.ReLU and type(out[i + 1][1]) in (nn.MaxPool1d, nn.MaxPool2d):
            out[i], out[i + 1] = out[i + 1], out[i]
    return out


def stacked_forward(layers: list[tuple[str, nn.Module]], params: dict[str, torch.Tensor],
                     x: torch.Tensor, start: int = 0) -> torch.Tensor:
    """The outputs (C, B, ...) of C copies of the network (``params[name]``: (C, *shape)) on ``x`` (C, B, ...).

    Convolutions are batched matrix products of their patches (im2col, :func:`_conv_as_matmul`), and
    the activations from a convolution to the next flatten or linear layer stay channels-last
    (C, B, *spatial, channels), where max pooling runs on channels-last memory. ``start > 0``:
    ``x`` holds the patches (C, B, *out_spatial, K) of convolution ``layers[start - 1]``
    (see :func:`input_patches`), and the forward goes on from there.
    """
    C, B = x.shape[:2]
    last = False  # activations are (C, B, *spatial, channels)
    if start:
        prefix = layers[start - 1][0]
        x, last = _conv_of_patches(x, params[prefix + "weight"], params.get(prefix + "bias")), True
        layers = layers[start:]
    for prefix, m in layers:
        if isinstance(m, nn.Linear):
            x, last = _stacked_linear(_first_if(x, last), params, prefix), False
        elif isinstance(m, (nn.Conv1d, nn.Conv2d)) and _patches_pay(m):
            x = _last_if_not(x, last)
            x, last = _conv_as_matmul(m, params[prefix + "weight"], params.get(prefix + "bias"), x), True
        elif isinstance(m, (nn.Conv1d, nn.Conv2d)):
            x, last = _grouped_conv(m, _first_if(x, last), params, prefix), False
        elif isinstance(m, (nn.MaxPool1d, nn.MaxPool2d)):
            x = _max_pool_last(m, x) if last else _max_pool_first(m, x)
        elif isinstance(m, nn.Flatten):
            x, last = _first_if(x, last).reshape(C, B, -1), False
        elif isinstance(m, Reshape):
            x, last = _first_if(x, last).reshape(C, B, *m.shape), False
        else:
            x = m(x)
    return _channels_first(x) if last else x


def _channels_first(t: torch.Tensor) -> torch.Tensor:
    """Channels-last (C, B, *spatial, channels) activations as channels-first (C, B, channels, *spatial)."""
    nd = t.dim() - 3
    return t.permute(0, 1, 2 + nd, *range(2, 2 + nd))


def _first_if(x: torch.Tensor, last: bool) -> torch.Tensor:
    """``x`` channels-first: :func:`_channels_first` of it when it is channels-last (``last``)."""
    return _channels_first(x) if last else x


def _last_if_not(x: torch.Tensor, last: bool) -> torch.Tensor:
    """``x`` channels-last: channels-first (C, B, channels, *spatial) ``x`` permuted unless ``last``."""
    if last:
        return x
    nd = x.dim() - 3
    return x.permute(0, 1, *range(3, 3 + nd), 2)


def _stacked_linear(x: torch.Tensor, params: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    """C clients' linear layers on ``x`` (C, B, in): one batched matrix product, (C, B, out)."""
    w, b = params[prefix + "weight"], params.get(prefix + "bias")
    return torch.bmm(x, w.transpose(1, 2)) if b is None else torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))


def _grouped_conv(m: nn.Module, x: torch.Tensor, params: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
    """C clients' wide convolutions (patches much larger than the output) of channels-first ``x``
    (C, B, in, *spatial) as one grouped convolution, the clients being the groups: (C, B, out, *out_spatial)."""
    C, B = x.shape[:2]
    w, b = params[prefix + "weight"], params.get(prefix + "bias")
    cin, spatial = x.shape[2], x.shape[3:]
    xg = x.transpose(0, 1).reshape(B, C * cin, *spatial)
    conv = F.conv2d if isinstance(m, nn.Conv2d) else F.conv1d
    y = conv(xg, w.reshape(C * w.shape[1], *w.shape[2:]), None if b is None else b.reshape(-1), m.stride,
             m.padding, m.dilation, C)
    return y.reshape(B, C, w.shape[1], *y.shape[2:]).transpose(0, 1).contiguous()


def _max_pool_last(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Max pooling ``m`` of channels-last ``x`` (C, B, *spatial, channels), channels-last out."""
    C, B = x.shape[:2]
    # channels-last memory: max_pool2d's vectorised kernel over the channels, no copy
    sp = x.shape[2:-1]
    nd = len(sp)
    xs = x.reshape(C * B, *([1] if nd == 1 else []), *sp, x.shape[-1]).permute(0, 3, 1, 2)
    y = F.max_pool2d(xs, _as_2d(m.kernel_size, nd), _as_2d(m.stride if m.stride else m.kernel_size, nd),
                     _as_2d(m.padding, nd, 0), _as_2d(m.dilation, nd), m.ceil_mode)
    y = y.permute(0, 2, 3, 1)
    return y.reshape(C, B, *y.shape[1 + (nd == 1):])


def _max_pool_first(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Max pooling ``m`` of channels-first ``x`` (C, B, channels, *spatial), channels-first out."""
    C, B = x.shape[:2]
    pool = F.max_pool2d if isinstance(m, nn.MaxPool2d) else F.max_pool1d
    y = pool(x.reshape(C * B, *x.shape[2:]), m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)
    return y.reshape(C, B, *y.shape[1:])


def _patches_pay(m: nn.Module) -> bool:
    """Whether convolution ``m`` runs as a matrix product of its patches: when a position's patch
    (in x prod(kernel) values) is at most twice its output (out channels); wider kernels would copy
    each input value prod(kernel) times for little arithmetic, and run as a grouped convolution."""
    return m.in_channels * math.prod(_tuple(m.kernel_size, 1 if isinstance(m, nn.Conv1d) else 2)) \
        <= 2 * m.out_channels


def _conv_as_matmul(m: nn.Module, w: torch.Tensor, b: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    """C clients' convolutions (``w``: (C, out, in, *k)) of channels-last ``x`` (C, B, *spatial, in) as one
    batched matrix product of the patches (im2col): (C, B * positions, in * prod(k)) @ (C, in * prod(k), out);
    the result is channels-last (C, B, *out_spatial, out)."""
    return _conv_of_patches(_patches(m, x, tuple(w.shape[3:]), 2), w, b)


def _patches(m: nn.Module, x: torch.Tensor, k: tuple[int, ...], lead: int) -> torch.Tensor:
    """The patches of channels-last ``x`` (*lead, *spatial, in) that convolution ``m`` (kernel ``k``)
    multiplies: (*lead, *out_spatial, in * prod(k)), in the order of ``weight.reshape(out, -1)``."""
    nd = len(k)
    pads = [0, 0]
    for p in reversed(_tuple(m.padding, nd)):
        pads += [p, p]
    if any(pads):
        x = F.pad(x, pads)
    st, dil = _tuple(m.stride, nd), _tuple(m.dilation, nd)
    for d in range(nd):
        x = x.unfold(lead + d, dil[d] * (k[d] - 1) + 1, st[d])
        if dil[d] > 1:
            x = x[..., ::dil[d]]
    # (*lead, *out_spatial, in, *k)
    return x.reshape(*x.shape[:lead + nd], -1)


def _conv_of_patches(cols: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """(C, B, *out_spatial, K) patches times the clients' kernels: (C, B, *out_spatial, out)."""
    C = cols.shape[0]
    flat = cols.reshape(C, -1, cols.shape[-1])
    wm = w.reshape(C, w.shape[1], -1).transpose(1, 2)
    y = torch.bmm(flat, wm) if b is None else torch.baddbmm(b.unsqueeze(1), flat, wm)
    return y.reshape(*cols.shape[:-1], w.shape[1])


def _tuple(v: int | Sequence[int], n: int) -> tuple[int, ...]:
    return tuple(int(a) for a in v) if isinstance(v, (tuple, list)) else (int(v),) * n


def _as_2d(v: int | Sequence[int], nd: int, one: int = 1) -> tuple[int, ...]:
    """A pooling setting for ``max_pool2d``: a 1-D pooling runs as a 1 x k one (``one`` in front)."""
    return (one, *_tuple(v, 1)) if nd == 1 else _tuple(v, 2)


def input_conv(layers: list[tuple[str, nn.Module]]) -> int:
    """1 + the index of the network's first layer when it is a convolution on the input (after
    reshapes only) that runs on its patches (:func:`_patches_pay`), else 0: its patches can be cut
    once from all the rows (:func:`input_patches`)."""
    for i, (_, m) in enumerate(layers):
        if isinstance(m, (nn.Conv1d, nn.Conv2d)):
            return i + 1 if _patches_pay(m) else 0
        if not isinstance(m, Reshape):
            return 0
    return 0


def input_patches(layers: list[tuple[str, nn.Module]], start: int, X: torch.Tensor) -> torch.Tensor:
    """The patches (N, *out_spatial, K) of every row of ``X`` (N, *sample_shape) for the input convolution
    ``layers[start - 1]``: cut once per call of :func:`fedray.nn.batched.fit_many`, then gathered by the
    steps' rows."""
    N = X.shape[0]
    for _, m in layers[:start - 1]:
        X = X.reshape(N, *m.shape)
    conv = layers[start - 1][1]
    nd = 2 if isinstance(conv, nn.Conv2d) else 1
    x = X.permute(0, *range(2, 2 + nd), 1)  # channels-last
    return _patches(conv, x, _tuple(conv.kernel_size, nd), 1).contiguous()
