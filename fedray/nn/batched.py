"""Batched local training: the copies of one network that many clients train in a round, trained together.

The clients of one host that train the same architecture in a round keep one
stacked copy of its parameters each (leading dimension: the client) and take
their optimizer steps together: one forward and backward pass per step computes
every client's gradient on its own mini-batch — written out layer by layer for the
built-in layers, else by ``torch.func.vmap`` of ``grad_and_value(functional_call(...))``.
The written-out forward is made of batched matrix products: linear layers directly,
convolutions on their patches (im2col; the input layer's patches are cut once per
call, not per step), with channels-last activations between a convolution and the
next dense layer so that max pooling runs on contiguous channels; a ReLU right
before a max pooling is applied after it (the same values and gradients, on a
fraction of the values). Each client runs exactly the steps of
:func:`fedray.nn.train.fit`:

* epoch e visits its rows in the order ``rng.permutation(n_i)`` of its own
  generator (drawn epoch after epoch, as the loop draws them), in mini-batches of
  B; the last one of an epoch may be smaller;
* the loss of a step is the mean loss over the client's rows of that batch;
* SGD (momentum, weight decay as in ``torch.optim.SGD``) or Adam (as ``torch.optim.Adam``).

Clients hold different numbers of rows, so they take different numbers of steps
(``E * ceil(n_i / B)``): a step's batches are padded to B rows with a mask, and a
client whose steps are done no longer moves (its parameter and optimizer updates
are masked). The results equal the loop's up to float rounding (the order of the
sums inside the batched kernels differs; tests hold them to 1e-5 relative).

Only networks without buffers and without random or batch-dependent layers
(dropout, batch normalisation) are batched (:func:`can_batch`): the built-in
models all qualify; others train client by client.

On the CPU, stacking pays for small networks (per-step overhead dominates their
loop); a network whose activations for one client's batch are large (``cnn28``)
already keeps the CPU busy client by client, and stacking only spills the caches,
so :func:`clients_per_chunk` sends it to the loop (on a GPU everything is stacked).
The choice depends only on the network, B and the device, so a client trains the
same way whichever clients share its host.

API: ``can_batch(model) -> bool``; ``clients_per_chunk(model, sample_shape,
batch_size) -> int`` (0: the loop); ``fit_many(model, starts, data, rngs, *, epochs,
batch_size, lr, optimizer, momentum, weight_decay, path, loss, chunk) ->
(weights (C, P) float32, last-epoch losses (C,))``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap
from torch.nn import functional as F

from fedray.core.errors import ConfigError
from fedray.nn.train import tensor, torch_threads

#: Layers whose forward draws random numbers or depends on the whole batch: trained client by client.
_UNBATCHABLE = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._NormBase, nn.LocalResponseNorm)


def can_batch(model: nn.Module) -> bool:
    """Whether ``model`` can train in the batched path: no buffers, no dropout or batch normalisation."""
    if any(True for _ in model.buffers()):
        return False
    return not any(isinstance(m, _UNBATCHABLE) for m in model.modules())


def _schedule(sizes: Sequence[int], perms: list[list[np.ndarray]], offsets: np.ndarray, batch_size: int,
              pad: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row indices (C, T, B) into the stacked rows (``pad`` where a batch is shorter), the mask
    (C, T, B), and for each client and step the weight of its loss in the last epoch's mean (C, T)."""
    C = len(sizes)
    steps = [len(p) * math.ceil(n / batch_size) if n else 0 for n, p in zip(sizes, perms)]
    T = max(steps) if steps else 0
    idx = np.full((C, T, batch_size), pad, dtype=np.int64)
    last = np.zeros((C, T), dtype=np.float64)
    for i, (n, client_perms) in enumerate(zip(sizes, perms)):
        if not n:
            continue
        s = math.ceil(n / batch_size)
        for e, perm in enumerate(client_perms):
            rows = np.full(s * batch_size, pad, dtype=np.int64)
            rows[:n] = perm + offsets[i]
            idx[i, e * s:(e + 1) * s] = rows.reshape(s, batch_size)
        counts = np.minimum(batch_size, n - batch_size * np.arange(s))
        last[i, (len(client_perms) - 1) * s:len(client_perms) * s] = counts / n
    return idx, idx != pad, last


#: On the CPU, a network whose activations for one client's mini-batch exceed this many values trains
#: client by client: its loop already keeps the CPU busy, and stacking clients only moves the working
#: set out of the caches. Stacked clients are cut into chunks of at most CPU_CHUNK values of activations.
CPU_CLIENT_LIMIT = 1_000_000
CPU_CHUNK = 8_000_000


def activation_size(model: nn.Module, sample_shape: Sequence[int]) -> int:
    """Values of all the layers' outputs for one sample (what a step keeps for the backward pass)."""
    memo = model.__dict__.setdefault("_fedray_activations", {})
    key = (tuple(int(d) for d in sample_shape), str(next(model.parameters()).device))
    if key not in memo:
        memo[key] = _count_activations(model, key[0])
    return memo[key]


def _count_activations(model: nn.Module, sample_shape: tuple[int, ...]) -> int:
    total = 0

    def count(_m: nn.Module, _inp: object, out: object) -> None:
        nonlocal total
        if isinstance(out, torch.Tensor):
            total += out.numel()

    leaves = [m for m in model.modules() if not any(True for _ in m.children())]
    hooks = [m.register_forward_hook(count) for m in leaves]
    dev = next(model.parameters()).device
    try:
        with torch.no_grad():
            model(torch.zeros((1, *sample_shape), device=dev))
    finally:
        for h in hooks:
            h.remove()
    return max(1, total)


def clients_per_chunk(model: nn.Module, sample_shape: Sequence[int], batch_size: int,
                      stack: str = "always") -> int:
    """How many clients train in one stacked batch: 0 (train client by client: ``stack`` is
    "never", or "gpu" and the network is on the CPU, or a large network on the CPU, see
    :data:`CPU_CLIENT_LIMIT`), else at least 2. Depends only on the network, the sample shape,
    B, the device and ``stack``, never on which clients share a host."""
    if stack not in ("gpu", "always", "never"):
        raise ValueError(f"stack: must be 'gpu', 'always' or 'never'; got {stack!r}")
    if stack == "never" or not can_batch(model):
        return 0
    on_cpu = next(model.parameters()).device.type == "cpu"
    if stack == "gpu" and on_cpu:
        return 0
    if not on_cpu:
        return 1 << 30
    per_client = int(batch_size) * activation_size(model, sample_shape)
    if per_client > CPU_CLIENT_LIMIT:
        return 0
    return max(2, CPU_CHUNK // per_client)


def fit_many(model: nn.Module, starts: np.ndarray, data: Sequence[tuple[np.ndarray, np.ndarray]],
             rngs: Sequence[np.random.Generator], *, epochs: int, batch_size: int, lr: float,
             optimizer: str = "sgd", momentum: float = 0.0, weight_decay: float = 0.0,
             path: str = "auto", loss: str = "cross_entropy",
             chunk: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Train one copy of ``model`` per client, all at once, with cross-entropy (or reconstruction MSE).

    Parameters
    ----------
    model : nn.Module
        The architecture (its own weights are not used or changed), on the device the
        clients train on; :func:`can_batch` must hold.
    starts : ndarray of shape (C, P)
        Each client's start weights (flat, ``model.parameters()`` order).
    data : sequence of C pairs ``(X_i (n_i, *sample_shape), y_i (n_i,))``
        (with ``loss="mse"``: ``(X_i,)``, the targets are the inputs)
    rngs : sequence of C numpy Generators
        Client i's batch order: ``rngs[i].permutation(n_i)`` for each epoch, drawn in epoch order
        (clients with no rows draw nothing), as :func:`fedray.nn.train.fit` draws it.
    epochs, batch_size, lr, optimizer, momentum, weight_decay
        As :func:`fedray.nn.train.fit`.
    path : {"auto", "explicit", "vmap"}
        How the clients' gradients are computed: ``explicit``, one forward of the stacked
        networks written out layer by layer (linear layers and convolutions as batched
        matrix products; the built-in models' layers), or ``vmap``
        (``torch.func``: any batchable network, slower for small networks). ``auto``:
        explicit where every layer is known.
    loss : {"cross_entropy", "mse"}
        ``F.cross_entropy(model(xb), yb)`` or, for autoencoders, ``F.mse_loss(model(xb), xb)``,
        the mean over a client's rows of its batch.
    chunk : int or None
        Train at most this many clients at once (default: all); see :func:`clients_per_chunk`.

    Returns
    -------
    weights : ndarray of shape (C, P), float32
    losses : ndarray of shape (C,)
        Each client's mean loss over its last epoch (``nan`` for a client without rows).
    """
    C = len(data)
    if len(rngs) != C or np.shape(starts)[0] != C:
        raise ValueError(f"fit_many: {C} clients' data, {len(rngs)} generators, {np.shape(starts)[0]} start vectors")
    if epochs < 1 or batch_size < 1:
        raise ConfigError(f"epochs and batch_size must be >= 1; got epochs={epochs}, batch_size={batch_size}")
    if loss not in ("cross_entropy", "mse"):
        raise ValueError(f"fit_many: loss must be 'cross_entropy' or 'mse'; got {loss!r}")
    if optimizer not in ("sgd", "adam"):
        raise ConfigError(f"algorithm.params.optimizer: must be 'sgd' or 'adam'; got {optimizer!r}")
    if not can_batch(model):
        raise ValueError("fit_many: the model has buffers, dropout or batch normalisation; train it client by client")
    chunk = max(2, int(chunk)) if chunk else C
    if C > chunk:  # a client's bits do not depend on the clients beside it, so chunks change nothing
        parts = [fit_many(model, np.asarray(starts)[a:a + chunk], data[a:a + chunk], rngs[a:a + chunk],
                          epochs=epochs, batch_size=batch_size, lr=lr, optimizer=optimizer, momentum=momentum,
                          weight_decay=weight_decay, path=path, loss=loss) for a in range(0, C, chunk)]
        return np.concatenate([w for w, _ in parts]), np.concatenate([l for _, l in parts])
    if C == 1:
        # One client trains beside an empty one: a single client may get other kernels (a matrix product
        # instead of a batched one), and a client's bits must not depend on how many clients share its host.
        empty = (np.zeros((0, *np.shape(data[0][0])[1:]), dtype=np.float32),
                 np.zeros(0, dtype=np.int64))[:len(data[0])]
        w, losses = fit_many(model, np.concatenate([np.asarray(starts)] * 2), [data[0], empty], [rngs[0], rngs[0]],
                             epochs=epochs, batch_size=batch_size, lr=lr, optimizer=optimizer, momentum=momentum,
                             weight_decay=weight_decay, path=path, loss=loss)
        return w[:1], losses[:1]
    first = next(model.parameters())
    dev = first.device
    n_params = sum(p.numel() for p in model.parameters())
    if np.ndim(starts) != 2 or np.shape(starts)[1] != n_params:
        raise ValueError(f"fit_many: the model has {n_params} parameters; "
                         f"got start vectors of shape {np.shape(starts)}")
    names = [name for name, _ in model.named_parameters()]
    shapes = [p.shape for p in model.parameters()]
    sizes = [int(len(d[0])) for d in data]
    perms = [[rng.permutation(n) for _ in range(epochs)] if n else [] for rng, n in zip(rngs, sizes)]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    pad = int(offsets[-1])
    idx, mask, last = _schedule(sizes, perms, offsets, int(batch_size), pad)

    if path not in ("auto", "explicit", "vmap"):
        raise ValueError(f"fit_many: path must be 'auto', 'explicit' or 'vmap'; got {path!r}")
    known = _layers(model) is not None
    if path == "explicit" and not known:
        raise ValueError("fit_many: the network has layers the explicit stacked forward does not know; use path='vmap'")
    explicit = known and path != "vmap"
    with torch_threads():
        sample_shape = tuple(np.shape(data[0][0])[1:]) if C else ()
        X = torch.cat([tensor(d[0], dev) for d in data] + [torch.zeros((1, *sample_shape), device=dev)])
        Y = X if loss == "mse" else torch.cat([tensor(d[1], dev).reshape(-1) for d in data]
                                              + [torch.zeros(1, dtype=torch.int64, device=dev)])
        flat = torch.from_numpy(np.array(starts, dtype=np.float32, copy=True)).to(dev)
        params, at = {}, 0
        for name, shape in zip(names, shapes):
            k = math.prod(shape)
            params[name] = flat[:, at:at + k].reshape(C, *shape).clone()
            at += k
        idx_t = torch.from_numpy(idx).to(dev)
        mask_t = torch.from_numpy(mask.astype(np.float32)).to(dev)
        last_t = torch.from_numpy(last.astype(np.float32)).to(dev)
        live_t = torch.from_numpy(mask.any(axis=2)).to(dev)  # (C, T): the client takes step t

        step_fn = _stacked_step(model, names, loss) if explicit else _vmap_step(model, loss)
        if explicit:
            X = step_fn.prepare(X)  # type: ignore[attr-defined]
        state: dict[str, list[torch.Tensor]] = {}
        plain = optimizer == "sgd" and not momentum and not weight_decay
        total = torch.zeros(C, device=dev)
        was_training = model.training
        model.train()
        try:
            for t in range(idx.shape[1]):
                rows = idx_t[:, t]
                grads, step_loss = step_fn(params, X[rows], Y[rows], mask_t[:, t])
                total += step_loss.detach() * last_t[:, t]
                if plain:
                    # a client without rows in step t has a zero loss, so zero gradients: p - lr * 0 = p
                    torch._foreach_add_([params[name] for name in names], [grads[name] for name in names],
                                        alpha=-lr)
                    continue
                live = live_t[:, t]
                for name in names:
                    p, g = params[name], grads[name]
                    if weight_decay:
                        g = g.add(p, alpha=weight_decay)
                    if optimizer == "sgd":
                        if momentum:
                            if t == 0:
                                state[name] = [g.clone()]
                            else:
                                state[name][0].mul_(momentum).add_(g)
                            g = state[name][0]
                        upd = p.add(g, alpha=-lr)
                    else:
                        moments = state.setdefault(name, [torch.zeros_like(p), torch.zeros_like(p)])
                        upd = _adam(p, g, moments, t + 1, lr)
                    params[name] = torch.where(live.view(C, *([1] * (p.dim() - 1))), upd, p)
        finally:
            model.train(was_training)
        weights = torch.cat([params[name].reshape(C, -1) for name in names], dim=1)
        out_losses = np.where(np.array(sizes) > 0, total.to("cpu", torch.float64).numpy(), np.nan)
        return weights.detach().to("cpu", torch.float32).numpy(), out_losses


def _vmap_step(model: nn.Module,
               loss: str = "cross_entropy") -> Callable[..., tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """Every client's gradient and loss by ``vmap(grad_and_value(functional_call))`` (any batchable network)."""

    def loss_one(p: dict[str, torch.Tensor], xb: torch.Tensor, yb: torch.Tensor, mb: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, p, (xb,))
        rows = F.cross_entropy(out, yb, reduction="none") if loss == "cross_entropy" \
            else (out - yb).pow(2).reshape(out.shape[0], -1).mean(1)
        return (rows * mb).sum() / mb.sum().clamp_min(1.0)

    return vmap(grad_and_value(loss_one))


#: Parameter-free layers that act on each value alone: applied to the stacked batch as they are.
_ELEMENTWISE = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.LeakyReLU, nn.ELU, nn.SiLU, nn.Identity)


def _layers(model: nn.Module) -> list[tuple[str, nn.Module]] | None:
    """The network as a flat list of ``(parameter prefix, layer)`` when every layer is one the
    explicit stacked forward knows (:func:`_stacked_forward`), else None."""
    from fedray.nn.autoencoder import Autoencoder
    from fedray.nn.models import _Reshape

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
        if (type(m) is nn.Flatten and m.start_dim == 1 and m.end_dim == -1) or type(m) is _Reshape \
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


def _stacked_forward(layers: list[tuple[str, nn.Module]], params: dict[str, torch.Tensor],
                     x: torch.Tensor, start: int = 0) -> torch.Tensor:
    """The outputs (C, B, ...) of C copies of the network (``params[name]``: (C, *shape)) on ``x`` (C, B, ...).

    Convolutions are batched matrix products of their patches (im2col, :func:`_conv_as_matmul`), and
    the activations from a convolution to the next flatten or linear layer stay channels-last
    (C, B, *spatial, channels), where max pooling runs on channels-last memory. ``start > 0``:
    ``x`` holds the patches (C, B, *out_spatial, K) of convolution ``layers[start - 1]``
    (see :func:`_input_patches`), and the forward goes on from there.
    """
    from fedray.nn.models import _Reshape

    C, B = x.shape[:2]
    last = False  # activations are (C, B, *spatial, channels)
    if start:
        prefix = layers[start - 1][0]
        x, last = _conv_of_patches(x, params[prefix + "weight"], params.get(prefix + "bias")), True
        layers = layers[start:]

    def first(t: torch.Tensor) -> torch.Tensor:  # channels-last -> channels-first
        nd = t.dim() - 3
        return t.permute(0, 1, 2 + nd, *range(2, 2 + nd))

    for prefix, m in layers:
        if isinstance(m, nn.Linear):
            if last:
                x, last = first(x), False
            w, b = params[prefix + "weight"], params.get(prefix + "bias")
            x = torch.bmm(x, w.transpose(1, 2)) if b is None else torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))
        elif isinstance(m, (nn.Conv1d, nn.Conv2d)) and _patches_pay(m):
            if not last:
                nd = x.dim() - 3
                x, last = x.permute(0, 1, *range(3, 3 + nd), 2), True
            x = _conv_as_matmul(m, params[prefix + "weight"], params.get(prefix + "bias"), x)
        elif isinstance(m, (nn.Conv1d, nn.Conv2d)):
            # wide kernels (patches much larger than the output): one grouped convolution, the clients
            # being the groups
            if last:
                x, last = first(x), False
            w, b = params[prefix + "weight"], params.get(prefix + "bias")
            cin, spatial = x.shape[2], x.shape[3:]
            xg = x.transpose(0, 1).reshape(B, C * cin, *spatial)
            conv = F.conv2d if isinstance(m, nn.Conv2d) else F.conv1d
            y = conv(xg, w.reshape(C * w.shape[1], *w.shape[2:]), None if b is None else b.reshape(-1), m.stride,
                     m.padding, m.dilation, C)
            x = y.reshape(B, C, w.shape[1], *y.shape[2:]).transpose(0, 1).contiguous()
        elif isinstance(m, (nn.MaxPool1d, nn.MaxPool2d)):
            if last:
                # channels-last memory: max_pool2d's vectorised kernel over the channels, no copy
                sp = x.shape[2:-1]
                nd = len(sp)
                xs = x.reshape(C * B, *([1] if nd == 1 else []), *sp, x.shape[-1]).permute(0, 3, 1, 2)
                y = F.max_pool2d(xs, _as_2d(m.kernel_size, nd), _as_2d(m.stride if m.stride else m.kernel_size, nd),
                                 _as_2d(m.padding, nd, 0), _as_2d(m.dilation, nd), m.ceil_mode)
                y = y.permute(0, 2, 3, 1)
                x = y.reshape(C, B, *y.shape[1 + (nd == 1):])
                continue
            pool = F.max_pool2d if isinstance(m, nn.MaxPool2d) else F.max_pool1d
            y = pool(x.reshape(C * B, *x.shape[2:]), m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)
            x = y.reshape(C, B, *y.shape[1:])
        elif isinstance(m, nn.Flatten):
            if last:
                x, last = first(x), False
            x = x.reshape(C, B, -1)
        elif isinstance(m, _Reshape):
            if last:
                x, last = first(x), False
            x = x.reshape(C, B, *m.shape)
        else:
            x = m(x)
    return first(x) if last else x


def _patches_pay(m: nn.Module) -> bool:
    """Whether convolution ``m`` runs as a matrix product of its patches: when a position's patch
    (in x prod(kernel) values) is at most twice its output (out channels); wider kernels would copy
    each input value prod(kernel) times for little arithmetic, and run as a grouped convolution."""
    return m.in_channels * math.prod(_tuple(m.kernel_size, 1 if isinstance(m, nn.Conv1d) else 2)) \
        <= 2 * m.out_channels


#: The input convolution's patches are cut once per :func:`fit_many` for all rows when they take at most
#: this many values (``cnn8``: 576 a row); larger ones (``cnn28``: 19 600 a row) are cut step by step.
INPUT_PATCHES_MAX = 32_000_000


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


def _stacked_step(model: nn.Module, names: list[str],
                  loss: str = "cross_entropy") -> Callable[..., tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """Every client's gradient and loss from one explicit forward of the stacked networks (no vmap):
    the sum of the clients' losses has, for each client's parameters, that client's gradient."""
    layers = _layers(model)
    assert layers is not None
    conv_at = _input_conv(layers)
    start = 0  # set by prepare: the rows are the input convolution's patches

    def prepare(X: torch.Tensor) -> torch.Tensor:
        """The rows the steps gather from: ``X``, or its patches for the input convolution when
        they fit in :data:`INPUT_PATCHES_MAX` values."""
        nonlocal start
        start = 0
        if conv_at and len(X) and len(X) * _input_patches(layers, conv_at, X[:1]).numel() <= INPUT_PATCHES_MAX:
            start = conv_at
            return _input_patches(layers, conv_at, X)
        return X

    def step(params: dict[str, torch.Tensor], xb: torch.Tensor, yb: torch.Tensor,
             mb: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        with torch.enable_grad():
            out = _stacked_forward(layers, leaves, xb, start)
            C, B = out.shape[:2]
            if loss == "cross_entropy":
                rows = F.cross_entropy(out.reshape(C * B, -1), yb.reshape(-1), reduction="none").reshape(C, B)
            else:
                rows = (out - yb).pow(2).reshape(C, B, -1).mean(2)
            value = (rows * mb).sum(1) / mb.sum(1).clamp_min(1.0)
            grads = torch.autograd.grad(value.sum(), [leaves[k] for k in names])
        return dict(zip(names, grads)), value.detach()

    step.prepare = prepare  # type: ignore[attr-defined]
    return step


def _input_conv(layers: list[tuple[str, nn.Module]]) -> int:
    """1 + the index of the network's first layer when it is a convolution on the input (after
    reshapes only) that runs on its patches (:func:`_patches_pay`), else 0: its patches can be cut
    once from all the rows (:func:`_input_patches`)."""
    from fedray.nn.models import _Reshape

    for i, (_, m) in enumerate(layers):
        if isinstance(m, (nn.Conv1d, nn.Conv2d)):
            return i + 1 if _patches_pay(m) else 0
        if not isinstance(m, _Reshape):
            return 0
    return 0


def _input_patches(layers: list[tuple[str, nn.Module]], start: int, X: torch.Tensor) -> torch.Tensor:
    """The patches (N, *out_spatial, K) of every row of ``X`` (N, *sample_shape) for the input convolution
    ``layers[start - 1]``: cut once per call of :func:`fit_many`, then gathered by the steps' rows."""
    N = X.shape[0]
    for _, m in layers[:start - 1]:
        X = X.reshape(N, *m.shape)
    conv = layers[start - 1][1]
    nd = 2 if isinstance(conv, nn.Conv2d) else 1
    x = X.permute(0, *range(2, 2 + nd), 1)  # channels-last
    return _patches(conv, x, _tuple(conv.kernel_size, nd), 1).contiguous()




def _adam(p: torch.Tensor, g: torch.Tensor, st: list[torch.Tensor], step: int, lr: float,
          betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> torch.Tensor:
    """One step of ``torch.optim.Adam`` (defaults, no amsgrad) on stacked parameters; the new values."""
    m, v = st
    m.lerp_(g, 1 - betas[0])
    v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
    bc1 = 1 - betas[0] ** step
    bc2_sqrt = math.sqrt(1 - betas[1] ** step)
    denom = (v.sqrt() / bc2_sqrt).add_(eps)
    return p.addcdiv(m, denom, value=-lr / bc1)


__all__ = ["CPU_CHUNK", "CPU_CLIENT_LIMIT", "activation_size", "can_batch", "clients_per_chunk", "fit_many"]
