"""Privacy mechanisms for clients' summed statistics: secure aggregation (simulated),
differential privacy, and the minimum-sample guard.

They apply to every reply that is a :class:`~fedray.stats.Stats` (k-means sums and
counts, FCM weighted sums, FedFuzzDB spreads, evaluation tables...); other replies
(local centres of a k-FED start, model weights) pass unchanged and are counted as
``unprotected_messages`` in the summary's privacy account.

Secure aggregation (Bonawitz et al., CCS 2017, pairwise masks only)
    Each statistic vector x_i (``Stats.flat()``, length L) is encoded in fixed
    point, round(x * 2^64), and masked in the integers modulo 2^256:

        y_i = enc(x_i) + sum_{j in P(i), j > i} m_ij - sum_{j in P(i), j < i} m_ij   (mod 2^256)

    where P(i) are the client's mask peers in this round (every other client of the
    cohort, or ``privacy.mask_neighbors`` of them on a seeded ring) and m_ij is
    uniform, drawn from a stream keyed by (seed, i, j, round, attempt) that only
    i and j can compute (in the protocol, from a Diffie-Hellman key agreement).
    The server receives only y_i (uniformly distributed on their own); their sum
    is enc(sum x_i) exactly because the masks cancel pairwise. A client of the
    cohort that did not answer leaves the masks it shares with answering peers in
    the sum; the server removes them (in the protocol, by reconstructing the
    dropped client's seeds from Shamir shares held by the survivors; here, by
    drawing them again) and counts them as ``recovered_masks``. The decoded total
    is exact up to 2^-64 per client; the algorithm receives it on the first
    answering client's reply and zero statistics on the others, so that any
    aggregation that sums replies gives the total.

Differential privacy (Gaussian mechanism; Abadi et al. 2016; Mironov 2017)
    Each client clips its statistic vector to L2 norm ``dp.clip`` = C (scaling the
    whole vector, which keeps every ratio of sums inside a client) and adds
    Gaussian noise. Without secure aggregation each client adds N(0, (z C)^2) to
    its own vector (local DP); with it, each adds N(0, (z C)^2 / |cohort|), so the
    total carries N(0, (z C)^2 a / |cohort|) for a answering clients (distributed
    DP). The unit is a client (its whole shard) per round. The account composes
    the rounds in Rényi DP, eps_RDP(alpha) = sum_rounds alpha / (2 z_r^2), and
    reports eps(delta) = min_alpha eps_RDP(alpha) + log(1/delta) / (alpha - 1)
    (Mironov 2017, Prop. 3), without amplification by sampling (an upper bound).
    Evaluation passes (metrics for the simulation) are not noised.

Minimum-sample guard (Corcuera Bárcena et al. 2021, Section 4.2)
    A client withholds (replies ``None``) a statistic vector of length L unless
    its N_m F unknowns exceed the L equations: N_m > L / F. For federated FCM,
    L = C (F + 1) (+1 for the objective), which is the paper's N_m > C (F + 1) / F.
"""
from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from fedray.algorithm import Reply, Task
from fedray.errors import DataError, RoundFailedError
from fedray.messages import Envelope
from fedray.runtime import Executor, ExecResult, ExecutorWrapper
from fedray.seeding import _u, client_rng, server_rng
from fedray.stats import Stats

log = logging.getLogger(__name__)

MOD_BITS = 256
MOD = 1 << MOD_BITS
FRAC_BITS = 64
SCALE = 1 << FRAC_BITS
ENTRY_BYTES = MOD_BITS // 8
LIMIT = 2.0 ** 150  # largest |value| accepted for masking (the sum must stay below 2^255 / 2^64)
_MASK_STREAM = 0x5A
_DP_STREAM = 29
_RING_STREAM = 13


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
        b = self.data.tobytes()
        return [int.from_bytes(b[k : k + ENTRY_BYTES], "little") for k in range(0, len(b), ENTRY_BYTES)]

    def __reduce__(self):
        return (MaskedStats, (self.data, self.layout))

    def __repr__(self) -> str:
        return f"MaskedStats({self.layout})"


def layout_of(stats: Stats) -> str:
    return ";".join(f"{k}:{tuple(stats[k].shape)}" for k in sorted(stats))


def template(layout: str) -> Stats:
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


def pair_mask(seed: int, i: int, j: int, round_: int, attempt: int, length: int) -> list[int]:
    """m_ij = m_ji: ``length`` uniform integers modulo 2^256 from the pair's stream."""
    lo, hi = (i, j) if i < j else (j, i)
    b = np.random.default_rng(np.random.SeedSequence(
        [_u(seed), _MASK_STREAM, lo, hi, _u(round_), attempt])).bytes(ENTRY_BYTES * length)
    return [int.from_bytes(b[k : k + ENTRY_BYTES], "little") for k in range(0, len(b), ENTRY_BYTES)]


def mask_peers(cohort: list[int], neighbors: int | None, seed: int, round_: int, attempt: int) -> dict[int, list[int]]:
    """Mask peers of each client: everyone else, or ``neighbors`` peers on a seeded ring."""
    n = len(cohort)
    if neighbors is None or neighbors >= n - 1:
        return {c: [p for p in cohort if p != c] for c in cohort}
    order = [cohort[k] for k in server_rng(seed, round_, _RING_STREAM, attempt).permutation(n)]
    h = max(1, neighbors // 2)
    peers: dict[int, set[int]] = {c: set() for c in cohort}
    for pos, c in enumerate(order):
        for s in range(1, h + 1):
            peers[c].add(order[(pos + s) % n])
            peers[c].add(order[(pos - s) % n])
    return {c: sorted(p) for c, p in peers.items()}


def private_call(env: Envelope, shared: Any, client: Any) -> Any:
    """Client side: run the algorithm's function, then guard, clip and noise, and mask its statistics."""
    out = env.fn(env.payload, shared, client)
    if not isinstance(out, Stats):
        return out
    ex = env.extra
    x = out.flat()
    if not np.all(np.isfinite(x)):
        bad = [k for k in sorted(out) if not np.all(np.isfinite(out[k]))]
        raise DataError(f"client {client.id}: statistics {bad} contain NaN or infinite values in round "
                        f"{ex['round']}; check the data for huge values")
    if ex.get("guard"):
        X = client.data.X
        F = max(1, X.shape[1])
        if not X.shape[0] * F > x.size:  # N_m > L / F (Corcuera Bárcena et al. 2021, Sec. 4.2)
            return None
    if ex.get("dp_std") is not None:
        norm = float(np.linalg.norm(x))
        clip = ex["clip"]
        if norm > clip:
            x = x * (clip / norm)
        rng = client_rng(client.seed, client.id, ex["round"], _DP_STREAM, ex["attempt"])
        x = x + rng.normal(0.0, ex["dp_std"], size=x.size)
    if not ex.get("mask"):
        return out.with_flat(x)
    if x.size and float(np.max(np.abs(x))) >= LIMIT:
        raise DataError(f"client {client.id}: a statistic of magnitude {float(np.max(np.abs(x))):.3g} is too large "
                        f"for secure aggregation (limit 2^150); scale the data (data.scale)")
    y = encode(x)
    me = client.id
    for p in ex["peers"].tolist():
        m = pair_mask(client.seed, me, p, ex["round"], ex["attempt"], len(y))
        if me < p:
            y = [a + b for a, b in zip(y, m)]
        else:
            y = [a - b for a, b in zip(y, m)]
    raw = b"".join((v % MOD).to_bytes(ENTRY_BYTES, "little") for v in y)
    return MaskedStats(np.frombuffer(raw, dtype=np.uint8).reshape(len(y), ENTRY_BYTES), layout_of(out))


class PrivacyLayer(ExecutorWrapper):
    """Executor layer: wraps each task so the client guards, noises and masks its statistics,
    and unmasks the total on the server side before the algorithm sees the replies.

    Parameters
    ----------
    inner : Executor
    privacy : PrivacyConfig
    seed : int
    """

    def __init__(self, inner: Executor, privacy: Any, seed: int) -> None:
        super().__init__(inner)
        self.cfg = privacy
        self.seed = int(seed)
        self.account: dict[str, Any] = {"rounds": [], "withheld": 0, "recovered_masks": 0,
                                        "unprotected_messages": 0, "masked_messages": 0}
        self._round: int | None = None
        self._attempt = 0

    def execute(self, round_: int, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        self._attempt = self._attempt + 1 if round_ == self._round else 0
        self._round = round_
        cfg, attempt = self.cfg, self._attempt
        cohort = sorted(tasks)
        training = round_ >= 0
        peers = mask_peers(cohort, cfg.mask_neighbors, self.seed, round_, attempt) if cfg.secure_aggregation else {}
        dp = cfg.dp if training else None
        dp_std = None
        if dp is not None:
            dp_std = dp.noise_multiplier * dp.clip / (math.sqrt(len(cohort)) if cfg.secure_aggregation else 1.0)
        sent = {}
        for cid in cohort:
            t = tasks[cid]
            extra = {"round": round_, "attempt": attempt, "mask": cfg.secure_aggregation,
                     "guard": cfg.min_samples_guard and training}
            if cfg.secure_aggregation:
                extra["peers"] = np.asarray(peers[cid], dtype=np.int64)
            if dp_std is not None:
                extra["dp_std"], extra["clip"] = dp_std, dp.clip
            sent[cid] = Task(private_call, Envelope(t.fn, t.payload, extra), t.shared, t.evaluation)
        res = self.inner.execute(round_, sent, timeout)
        acc = self.account
        n_stats = 0
        for r in res.replies:
            if r.update is None:
                acc["withheld"] += training and cfg.min_samples_guard
            elif isinstance(r.update, (Stats, MaskedStats)):
                n_stats += 1
            else:
                acc["unprotected_messages"] += 1
        if cfg.secure_aggregation:
            self._unmask(res, cohort, peers, round_, attempt)
        if cfg.min_samples_guard and training:
            self._fill_withheld(res, round_)
        if dp is not None and n_stats:
            answered = n_stats if cfg.secure_aggregation else len(cohort)
            z = dp.noise_multiplier * (math.sqrt(answered / len(cohort)) if cfg.secure_aggregation else 1.0)
            acc["rounds"].append({"round": round_, "attempt": attempt, "z": z})
        return res

    @staticmethod
    def _fill_withheld(res: ExecResult, round_: int) -> None:
        """Withheld statistics count as zero, so that any aggregation that sums replies works."""
        withheld = [k for k, r in enumerate(res.replies) if r.update is None]
        if not withheld:
            return
        sent = next((r.update for r in res.replies if isinstance(r.update, Stats)), None)
        if sent is None:
            raise RoundFailedError(
                f"round {round_}: every client withheld its statistics (privacy.min_samples_guard: a client sends "
                f"L statistics only if its N_m samples of F features give N_m * F > L); use fewer clusters, "
                f"fewer and larger clients, or turn the guard off")
        zero = sent.zero()
        for k in withheld:
            r = res.replies[k]
            res.replies[k] = Reply(r.client_id, zero, r.seconds, r.nbytes)

    def _unmask(self, res: ExecResult, cohort: list[int], peers: dict[int, list[int]], round_: int,
                attempt: int) -> None:
        masked = [(k, r) for k, r in enumerate(res.replies) if isinstance(r.update, MaskedStats)]
        if not masked:
            return
        layouts = {r.update.layout for _, r in masked}
        if len(layouts) > 1:
            raise RoundFailedError(f"round {round_}: secure aggregation needs one statistics layout per round; "
                                   f"clients sent {sorted(layouts)}")
        layout = layouts.pop()
        L = masked[0][1].update.data.shape[0]
        total = [0] * L
        for _, r in masked:
            total = [a + b for a, b in zip(total, r.update.ints())]
        answered = {r.client_id for _, r in masked}
        dropped = [c for c in cohort if c not in answered]
        for j in dropped:  # masks that answering peers share with clients that did not send theirs
            for i in peers.get(j, ()):
                if i in answered:
                    m = pair_mask(self.seed, i, j, round_, attempt, L)
                    total = [(a - b) if i < j else (a + b) for a, b in zip(total, m)]
                    self.account["recovered_masks"] += 1
        self.account["masked_messages"] += len(masked)
        tmpl = template(layout)
        summed = tmpl.with_flat(decode([t % MOD for t in total]))
        zero = tmpl
        for n, (k, r) in enumerate(masked):
            res.replies[k] = Reply(r.client_id, summed if n == 0 else zero, r.seconds, r.nbytes)

    def report(self) -> dict[str, Any]:
        acc = {**self.account, "rounds": list(self.account["rounds"])}
        cfg = self.cfg
        acc["config"] = {"secure_aggregation": cfg.secure_aggregation, "mask_neighbors": cfg.mask_neighbors,
                         "min_samples_guard": cfg.min_samples_guard,
                         "dp": None if cfg.dp is None else cfg.dp.model_dump()}
        return {**self.inner.report(), "privacy": acc}

    def restore(self, report: dict[str, Any]) -> None:
        self.inner.restore(report)
        acc = dict(report.get("privacy", {}))
        acc.pop("config", None)
        if acc:
            self.account = acc


def rdp_epsilon(zs: list[float], delta: float, alphas: np.ndarray | None = None) -> tuple[float, float]:
    """(epsilon, best alpha) of the Gaussian mechanism composed over rounds with multipliers ``zs``.

    eps_RDP(alpha) = sum_r alpha / (2 z_r^2); eps = min_alpha eps_RDP(alpha) + log(1/delta) / (alpha - 1)
    (Mironov 2017, Prop. 3).
    """
    if not zs:
        return 0.0, float("nan")
    if alphas is None:
        alphas = np.concatenate([1.0 + np.logspace(-3, 0, 60), np.linspace(2.05, 64, 400), np.geomspace(64, 1e5, 200)])
    rho = float(np.sum(0.5 / np.square(np.asarray(zs, dtype=np.float64))))
    eps = alphas * rho + math.log(1.0 / delta) / (alphas - 1.0)
    k = int(np.argmin(eps))
    return float(eps[k]), float(alphas[k])


def privacy_summary(acc: dict[str, Any]) -> dict[str, Any]:
    """What ``summary.json`` reports under ``privacy``."""
    cfg = acc.get("config", {})
    out: dict[str, Any] = {
        "secure_aggregation": bool(cfg.get("secure_aggregation")),
        "mask_neighbors": cfg.get("mask_neighbors"),
        "min_samples_guard": bool(cfg.get("min_samples_guard")),
        "masked_messages": int(acc.get("masked_messages", 0)),
        "recovered_masks": int(acc.get("recovered_masks", 0)),
        "withheld": int(acc.get("withheld", 0)),
        "unprotected_messages": int(acc.get("unprotected_messages", 0)),
    }
    dp = cfg.get("dp")
    if dp:
        zs = [r["z"] for r in acc.get("rounds", [])]
        eps, alpha = rdp_epsilon(zs, dp["delta"])
        out["dp"] = {"epsilon": eps, "delta": dp["delta"], "clip": dp["clip"], "noise_multiplier": dp["noise_multiplier"],
                     "noised_rounds": len(zs), "rdp_order": alpha, "unit": "client per round",
                     "mode": "distributed" if cfg.get("secure_aggregation") else "local",
                     "covers_all_messages": int(acc.get("unprotected_messages", 0)) == 0}
    return out
