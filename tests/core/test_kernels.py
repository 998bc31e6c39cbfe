"""The fused row kernels (fedray.core.kernels): the compiled and the numpy implementation give the
same bits, a segment's statistics do not depend on the other segments of the call, and the
statistics are the textbook ones."""
from __future__ import annotations

import numpy as np
import pytest

from fedray.core import kernels


def _data(seed: int, rows: int = 3000, d: int = 5, k: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, d)) * np.exp(rng.normal(size=d))
    C = rng.normal(size=(k, d))
    # Exact ties: integer rows, integer centres and a duplicated centre.
    X[: rows // 10] = np.round(X[: rows // 10])
    C[:2] = np.round(C[:2])
    C[2] = C[1]
    X[rows // 10] = C[0]  # a row on a centre (zero distance; FCM replaces it by eps)
    return X, C


def _offsets(seed: int, rows: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 100)
    cuts = np.sort(rng.integers(0, rows, n - 1))
    cuts[: 2] = cuts[0]  # an empty segment
    return np.r_[0, cuts, rows].astype(np.int64)


def _jit_lloyd(X, C, off):
    jit = kernels._jit()
    n, (k, d) = len(off) - 1, C.shape
    out = np.zeros((n, k, d)), np.zeros((n, k)), np.zeros(n)
    jit["lloyd"](X, np.ascontiguousarray(C.T), off, *out, np.zeros(0, dtype=np.intp), np.zeros(0))
    return out


def _jit_fcm2(X, C, off, objective):
    jit = kernels._jit()
    n, (k, d) = len(off) - 1, C.shape
    out = np.zeros((n, k)), np.zeros((n, k, d)), np.zeros(n)
    jit["fcm2"](X, np.ascontiguousarray(C.T), off, float(np.finfo(np.float64).eps), *out, objective)
    return out if objective else out[:2]


def _same(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("seed", range(4))
def test_compiled_and_numpy_give_the_same_bits(seed):
    """Every operation rounds in the same order in both implementations (no FMA, no reassociation)."""
    pytest.importorskip("numba")
    if kernels._jit() is None:
        pytest.skip("numba kernels not built (FEDRAY_KERNELS=numpy or no numba)")
    X, C = _data(seed, rows=3000 if seed % 2 else 12_000)  # both layouts of the numpy twin
    off = _offsets(seed, len(X), 9)
    assert _same(_jit_lloyd(X, C, off), kernels._lloyd_numpy(X, C, off))
    u, ws, obj = kernels._fcm_numpy(X, C, off, 2.0, True)
    assert _same(_jit_fcm2(X, C, off, True), (u, ws, obj))
    labels, d2 = np.empty(len(X), dtype=np.intp), np.empty(len(X))
    kernels._jit()["lloyd"](X, np.ascontiguousarray(C.T), np.array([0, len(X)]), np.zeros((0, 0, 0)),
                            np.zeros((0, 0)), np.zeros(0), labels, d2)
    assert _same((labels, d2), kernels._nearest_numpy(X, C))


@pytest.mark.parametrize("m", [2.0, 1.5])
def test_a_segment_gets_the_same_bits_alone_as_in_a_block(m, monkeypatch):
    """What makes clients_per_actor and runtime.batched invisible: a client's statistics in
    a host's block equal its statistics computed from its rows alone, also when the block
    is large enough to run compiled and the single client is not."""
    X, C = _data(7, rows=120_000, d=8, k=8)
    off = _offsets(7, len(X), 40)
    assert len(X) * 64 >= kernels.JIT_MIN_WORK > (off[1] - off[0]) * 64  # block compiled, one client not
    block_l = kernels.lloyd_stats(X, C, off)
    block_f = kernels.fcm_stats(X, C, m, off, objective=True)
    for i in range(len(off) - 1):
        rows = X[off[i]:off[i + 1]]
        s, c, e = kernels.lloyd_stats(rows, C)
        assert np.array_equal(s[0], block_l[0][i]) and np.array_equal(c[0], block_l[1][i])
        assert np.array_equal(e[0], block_l[2][i])
        u, ws, obj = kernels.fcm_stats(rows, C, m, objective=True)
        assert np.array_equal(u[0], block_f[0][i]) and np.array_equal(ws[0], block_f[1][i])
        assert np.array_equal(obj[0], block_f[2][i])


def test_lloyd_statistics_are_the_textbook_ones():
    X, C = _data(3)
    off = _offsets(3, len(X), 5)
    sums, counts, sse = kernels.lloyd_stats(X, C, off)
    d2 = ((X[:, None, :] - C[None]) ** 2).sum(-1)
    lab = np.argmin(d2, axis=1)
    assert not np.any(lab == 2)  # the duplicate of centre 1 never wins: the first of equals does
    for i in range(len(off) - 1):
        a, b = off[i], off[i + 1]
        ref = np.zeros_like(sums[i])
        np.add.at(ref, lab[a:b], X[a:b])
        np.testing.assert_allclose(sums[i], ref, rtol=1e-12, atol=1e-12)
        assert np.array_equal(counts[i], np.bincount(lab[a:b], minlength=len(C)))
        np.testing.assert_allclose(sse[i], d2[np.arange(a, b), lab[a:b]].sum(), rtol=1e-12)
    labels, near = kernels.nearest(X, C)
    assert np.array_equal(labels, lab)


def test_fcm_statistics_are_the_textbook_ones():
    X, C = _data(4)
    X[0] = C[3]  # exact zero distance
    for m in (2.0, 1.7):
        u, ws, obj = kernels.fcm_stats(X, C, m, objective=True)
        d2 = np.maximum(((X[:, None, :] - C[None]) ** 2).sum(-1), np.finfo(float).eps)
        U = d2 ** (-1.0 / (m - 1.0))
        U /= U.sum(1, keepdims=True)
        W = U ** m
        np.testing.assert_allclose(u[0], W.sum(0), rtol=1e-10)
        np.testing.assert_allclose(ws[0], W.T @ X, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(obj[0], (W * ((X[:, None, :] - C[None]) ** 2).sum(-1)).sum(), rtol=1e-10)
        assert np.isfinite(u).all() and np.isfinite(ws).all()


def test_bad_shapes_and_offsets_are_one_line_errors():
    X, C = _data(0, rows=10)
    with pytest.raises(ValueError, match="same number of features"):
        kernels.lloyd_stats(X, C[:, :2])
    with pytest.raises(ValueError, match="offsets"):
        kernels.lloyd_stats(X, C, np.array([0, 5, 3, 10]))
    with pytest.raises(ValueError, match="offsets"):
        kernels.fcm_stats(X, C, 2.0, np.array([0, 5]))
    with pytest.raises(ValueError, match="centre"):
        kernels.nearest(X, C[:0])


def test_no_rows_give_zero_statistics():
    C = np.eye(3)
    sums, counts, sse = kernels.lloyd_stats(np.zeros((0, 3)), C, np.array([0, 0, 0]))
    assert sums.shape == (2, 3, 3) and not sums.any() and not counts.any() and not sse.any()
    u, ws, obj = kernels.fcm_stats(np.zeros((0, 3)), C, 2.0, None, objective=True)
    assert not u.any() and not ws.any() and obj.tolist() == [0.0]
