"""Shamir secret sharing over GF(2^521 - 1), for the secrets of secure aggregation's dropout recovery."""
from __future__ import annotations

import functools
import math
import secrets as _secrets

PRIME = (1 << 521) - 1  # Mersenne prime: the Shamir field, larger than any 256-bit secret
SHARE_BYTES = 66


def shamir_split(secret: int, xs: list[int], t: int) -> dict[int, int]:
    """Shares f(x) of a random polynomial of degree t - 1 over GF(2^521 - 1) with f(0) = ``secret``."""
    coef = [secret] + [_secrets.randbelow(PRIME) for _ in range(t - 1)]
    out = {}
    for x in xs:
        acc = 0
        for c in reversed(coef):
            acc = (acc * x + c) % PRIME
        out[x] = acc
    return out


@functools.lru_cache(maxsize=4096)
def _lagrange_at_zero(xs: tuple[int, ...]) -> tuple[int, ...]:
    """Lagrange coefficients l_i(0) = prod_{j != i} x_j / (x_j - x_i) over GF(2^521 - 1)."""
    out = []
    for xi in xs:
        num, den = 1, 1
        for xj in xs:
            if xj != xi:
                num = num * xj % PRIME
                den = den * (xj - xi) % PRIME
        out.append(num * pow(den, -1, PRIME) % PRIME)
    return tuple(out)


def shamir_combine(shares: dict[int, int], t: int | None = None) -> int:
    """f(0) from shares {x: f(x)} (Lagrange interpolation at 0); uses the ``t`` smallest x (all if None)."""
    xs = tuple(sorted(shares))[: t if t else None]
    return sum(shares[x] * c for x, c in zip(xs, _lagrange_at_zero(xs))) % PRIME


def threshold(n_peers: int, fraction: float) -> int:
    """Shamir threshold t = floor(fraction * |P(u)|) + 1 of a client with ``n_peers`` share holders."""
    return max(1, min(n_peers, int(math.floor(fraction * n_peers)) + 1))
