"""What a masked message is made of: fixed-point integers modulo 2^256 and the PRG that masks them.

A client's statistics (a :class:`~fedray.core.stats.Stats`) are flattened to one float64
vector x of length L, encoded as round(x * 2^64) modulo 2^256, masked, and sent as a
:class:`MaskedStats` (L rows of 32 little-endian bytes) with the public layout of the
statistics, from which the server rebuilds the unmasked total (:func:`template`).
"""
from __future__ import annotations

import numpy as np

from fedray.core.stats import Stats

MOD_BITS = 256
MOD = 1 << MOD_BITS
FRAC_BITS = 64
SCALE = 1 << FRAC_BITS
ENTRY_BYTES = MOD_BITS // 8
LIMIT = 2.0 ** 150  # largest |value| accepted for masking (the sum must stay below 2^255 / 2^64)
#: Smallest largest-magnitude of a non-zero statistic accepted for masking: below it, the fixed point
#: (2^-64 absolute) keeps fewer than 12 significant bits of the statistic (below 2^-64 it becomes 0).
FLOOR = 2.0 ** -52


def too_small(stats: Stats, x: np.ndarray) -> tuple[str, float] | None:
    """The first statistic of ``stats`` (flattened in ``x``) that is not zero but whose largest
    magnitude is below :data:`FLOOR`, with that magnitude; None when every statistic encodes well."""
    pos = 0
    for name in sorted(stats):
        size = int(np.size(stats[name]))
        top = float(np.max(np.abs(x[pos : pos + size]))) if size else 0.0
        pos += size
        if 0.0 < top < FLOOR:
            return name, top
    return None


class MaskedStats:
    """A masked statistic vector: what the server receives from one client under secure aggregation.

    Attributes
    ----------
    data : ndarray of shape (L, 32), uint8
        y_i, one little-endian 256-bit integer a row.
    layout : str
        Names and shapes of the statistics (public), e.g. ``"obj:();u:(15,);ws:(15, 2)"``.
    """

    masked = True
    __slots__ = ("data", "layout")

    def __init__(self, data: np.ndarray, layout: str) -> None:
        self.data = data
        self.layout = layout

    def ints(self) -> list[int]:
        """The masked integers y_i."""
        return ints_of(self.data.tobytes())

    def __reduce__(self):
        return (MaskedStats, (self.data, self.layout))

    def __repr__(self) -> str:
        return f"MaskedStats({self.layout})"


def ints_of(b: bytes) -> list[int]:
    """The little-endian 256-bit integers of ``b`` (32 bytes each)."""
    return [int.from_bytes(b[k : k + ENTRY_BYTES], "little") for k in range(0, len(b), ENTRY_BYTES)]


def layout_of(stats: Stats) -> str:
    """The public layout of ``stats``: ``name:shape`` for each statistic, sorted by name."""
    return ";".join(f"{k}:{tuple(stats[k].shape)}" for k in sorted(stats))


def template(layout: str) -> Stats:
    """Zero statistics of ``layout`` (see :func:`layout_of`), to rebuild a total from its flat vector."""
    arrays = {}
    for part in layout.split(";") if layout else []:
        name, _, shape = part.partition(":")
        arrays[name] = np.zeros(tuple(int(s) for s in shape.strip("()").split(",") if s.strip()))
    return Stats(**arrays)


def encode(x: np.ndarray) -> list[int]:
    """Fixed-point integers round(x * 2^64) (exact scaling; rounding below 2^-64)."""
    return [round(float(v) * SCALE) for v in x]


def decode(total: list[int]) -> np.ndarray:
    """Signed fixed-point integers modulo 2^256 back to float64 (correctly rounded)."""
    half = MOD >> 1
    return np.array([((t - MOD) if t >= half else t) / SCALE for t in total], dtype=np.float64)


def prg(seed: bytes, length: int) -> list[int]:
    """``length`` integers modulo 2^256 from the ChaCha20 key stream of the 32-byte ``seed``."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms  # on first use (secure aggregation)

    enc = Cipher(algorithms.ChaCha20(seed, b"\0" * 16), mode=None).encryptor()
    return ints_of(enc.update(b"\0" * (ENTRY_BYTES * length)))
