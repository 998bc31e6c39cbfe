"""Privacy mechanisms for clients' summed statistics: secure aggregation (SecAgg),
differential privacy, the minimum-sample guard and the small-cluster guard.

They apply to every reply that is a :class:`~fedray.core.stats.Stats` (k-means sums and
counts, FCM weighted sums, evaluation tables...); other replies (local centres of a
k-FED start, model weights) pass unchanged and are counted as
``unprotected_messages`` in the summary's privacy account.

Secure aggregation (Bonawitz et al., CCS 2017, "Practical Secure Aggregation for
Privacy-Preserving Machine Learning", Fig. 4, honest-but-curious version with
double masking)
    Every round (every attempt of a round, every evaluation pass) runs one instance
    of the protocol on the cohort U:

    0. *Registration* (once per client): client u draws a long-lived X25519 key pair
       (c_u^SK, c_u^PK) from the operating system's entropy and sends c_u^PK. The
       server only relays public keys.
    1. *ShareKeys*: u draws a fresh X25519 key pair (s_u^SK, s_u^PK) and a fresh
       32-byte self-mask seed b_u (``os.urandom``), splits s_u^SK and b_u into Shamir
       shares with threshold t_u among its mask peers P(u) (over GF(2^521 - 1)), and
       encrypts the shares for peer v with AES-GCM under
       HKDF(X25519(c_u^SK, c_v^PK)). It sends s_u^PK and the ciphertexts; the server
       forwards each ciphertext to its recipient.
    2. *MaskedInputCollection*: u runs the algorithm's client function, encodes its
       statistic vector x_u (length L) in fixed point, round(x * 2^64), and sends

           y_u = enc(x_u) + PRG(b_u) + sum_{v in P(u), u < v} PRG(s_uv) - sum_{v in P(u), v < u} PRG(s_uv)
                                                                                   (mod 2^256)

       with s_uv = HKDF-SHA256(X25519(s_u^SK, s_v^PK), info = run | round | attempt | min(u,v) | max(u,v))
       and PRG = the ChaCha20 key stream (32 bytes an entry).
    3. *Unmasking*: the survivors U3 (clients whose masked vector arrived) reveal,
       for each peer v, the share of b_v if v is in U3, or the share of s_v^SK if v
       dropped out, never both (each client refuses the second kind). The server
       reconstructs b_u for every survivor and s_v^SK for every dropped peer from
       t shares (Lagrange at 0), recomputes the dropped clients' pairwise masks
       s_uv with the survivors' public keys, and obtains

           sum_{u in U3} y_u - sum_{u in U3} PRG(b_u) - (masks shared with dropped clients)
               = enc(sum_{u in U3} x_u)   (mod 2^256),

       exact up to 2^-64 per client.

    The modulus 2^256 leaves room for |x| < 2^150 with 64 fraction bits and any
    realistic cohort (sum below 2^255). A cohort smaller than ``privacy.min_cohort``
    is refused (:class:`~fedray.core.errors.RoundFailedError`), and so is a round whose
    survivors are fewer than ``min_cohort`` or hold fewer than t shares of a
    secret the server needs: the masked vectors are then discarded, never
    unmasked. The masks' secrets never derive from the experiment seed, so the
    same seed gives the same result (the masks cancel exactly) while the masked
    messages differ from run to run. Only the public peer graph (who masks with
    whom under ``privacy.mask_neighbors``, SecAgg+ style) is seeded.

    What is simulated: the server relays public keys and ciphertexts inside the
    executor layer (steps 0, 1 and 3 go straight to the clients' hosts, bypass the
    fault injector and are not in ``messages.parquet``; their count and bytes are
    in the privacy account), there is no PKI or signature (honest-but-curious
    server, no malicious clients), and the local runtime keeps clients in the
    server's process. What is real: key generation, key agreement, encryption,
    Shamir sharing and reconstruction, masking and unmasking; each secret is held
    by its client (``client.secrets``, inside the actor on Ray) and never saved in
    checkpoints.

Differential privacy (Gaussian mechanism; Abadi et al. 2016; Mironov 2017)
    Each client clips its statistic vector to L2 norm ``dp.clip`` = C (scaling the
    whole vector, which keeps every ratio of sums inside a client) and adds
    Gaussian noise drawn from a generator seeded by the operating system
    (``secrets``), never from the experiment seed, so runs with DP are not
    reproducible. ``dp.seeded_noise: true`` draws it from the seed instead, for
    debugging only: the account then says ``"private": false``. Without secure
    aggregation each client adds N(0, (z C)^2) to its own vector (local DP); with
    it, each adds N(0, (z C)^2 / |cohort|), so the total carries
    N(0, (z C)^2 a / |cohort|) for a answering clients (distributed DP). The unit is
    a client (its whole shard) per round. The account composes the rounds in Rényi
    DP, eps_RDP(alpha) = sum_rounds alpha / (2 z_r^2), and reports
    eps(delta) = min_alpha eps_RDP(alpha) + log(1/delta) / (alpha - 1)
    (Mironov 2017, Prop. 3), without amplification by sampling (an upper bound).
    Evaluation passes (metrics for the simulation) are not noised.

Minimum-sample guard (Corcuera Bárcena et al. 2021, Section 4.2)
    A client withholds (replies ``None``) a statistic vector of length L unless
    its N_m F unknowns exceed the L equations: N_m > L / F. For federated FCM,
    L = C (F + 1) (+1 with ``objective=True``), which is the paper's N_m > C (F + 1) / F.

Small-cluster guard (``privacy.min_cluster_count``)
    A per-cluster sum with count 1 is a row (``sums[k] = x`` next to ``counts[k] = 1``:
    k-means training and every centre-based evaluation pass). With
    ``min_cluster_count = c`` a client zeroes every cluster whose count is positive
    but below c, in training and evaluation replies, so such a cluster is left out
    of the sums (the result is no longer exact). Without secure aggregation, DP or
    this guard, every per-client cluster of one point is counted as a disclosure
    (``small_clusters``); under secure aggregation the same count is taken on the
    unmasked totals (``small_cluster_totals``: a global cluster of one point).
    Fuzzy sums (``ws``, ``u``) have no point counts: a one-row client reveals its
    row as ws[k] / u[k], which the minimum-sample guard (or secure aggregation)
    covers.
"""
from __future__ import annotations

import functools
import logging
import math
import os
import secrets as _secrets
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import (
    X25519PrivateKey,
    X25519PublicKey,
)
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedray.core.contract import Reply, Task
from fedray.core.errors import DataError, RoundFailedError
from fedray.core.seeding import client_rng, server_rng
from fedray.core.sizes import nbytes_of
from fedray.core.stats import Stats
from fedray.layers.messages import Envelope
from fedray.runtime.executor import ExecResult, Executor, ExecutorWrapper

log = logging.getLogger(__name__)

MOD_BITS = 256
MOD = 1 << MOD_BITS
FRAC_BITS = 64
SCALE = 1 << FRAC_BITS
ENTRY_BYTES = MOD_BITS // 8
LIMIT = 2.0 ** 150  # largest |value| accepted for masking (the sum must stay below 2^255 / 2^64)
PRIME = (1 << 521) - 1  # Mersenne prime: the Shamir field, larger than any 256-bit secret
SHARE_BYTES = 66
_CT_BYTES = 12 + 2 * SHARE_BYTES + 16  # nonce, two shares (s_sk, b), GCM tag
_DP_STREAM = 29
_RING_STREAM = 13
_KEEP_INSTANCES = 8  # protocol instances a client remembers (older ones are dropped)

# Per-cluster sums and the point counts next to them (crisp clusters: the small-cluster guard and count).
CLUSTER_PAIRS = {"sums": "counts", "weighted": "counts"}  # k-means, evaluation passes; fedkmeans


# --- masked messages --------------------------------------------------------------
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
        return _ints(self.data.tobytes())

    def __reduce__(self):
        return (MaskedStats, (self.data, self.layout))

    def __repr__(self) -> str:
        return f"MaskedStats({self.layout})"


def _ints(b: bytes) -> list[int]:
    return [int.from_bytes(b[k : k + ENTRY_BYTES], "little") for k in range(0, len(b), ENTRY_BYTES)]


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


# --- cryptographic primitives -------------------------------------------------------
def prg(seed: bytes, length: int) -> list[int]:
    """``length`` integers modulo 2^256 from the ChaCha20 key stream of the 32-byte ``seed``."""
    enc = Cipher(algorithms.ChaCha20(seed, b"\0" * 16), mode=None).encryptor()
    return _ints(enc.update(b"\0" * (ENTRY_BYTES * length)))


def _pk_bytes(sk: X25519PrivateKey) -> bytes:
    return sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _sk_int(sk: X25519PrivateKey) -> int:
    raw = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    return int.from_bytes(raw, "little")


def _sk_from_int(v: int) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(int(v).to_bytes(32, "little"))


def _kdf(secret: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def _instance_info(kind: bytes, run: str, round_: int, attempt: int, i: int, j: int) -> bytes:
    lo, hi = (i, j) if i < j else (j, i)
    return b"fedray-secagg/" + kind + f"/{run}/{round_}/{attempt}/{lo}/{hi}".encode()


def pair_seed(sk: X25519PrivateKey, peer_pk: bytes, run: str, round_: int, attempt: int, me: int, peer: int) -> bytes:
    """s_uv: HKDF-SHA256 of the X25519 agreement, bound to the protocol instance and the pair."""
    shared = sk.exchange(X25519PublicKey.from_public_bytes(bytes(peer_pk)))
    return _kdf(shared, _instance_info(b"mask", run, round_, attempt, me, peer))


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


def _share_key(client: Any, peer: int, peer_cpk: bytes) -> bytes:
    cache = client.secrets.setdefault("share_keys", {})
    key = (peer, bytes(peer_cpk))
    if key not in cache:
        shared = _long_key(client).exchange(X25519PublicKey.from_public_bytes(bytes(peer_cpk)))
        cache[key] = _kdf(shared, _instance_info(b"share", "", 0, 0, int(client.id), int(peer)))
    return cache[key]


def _long_key(client: Any) -> X25519PrivateKey:
    """The client's long-lived key pair for encrypting shares (drawn from the OS on first use)."""
    sec = client.secrets
    if "c_sk" not in sec:
        sec["c_sk"] = X25519PrivateKey.generate()
    return sec["c_sk"]


def threshold(n_peers: int, fraction: float) -> int:
    """Shamir threshold t = floor(fraction * |P(u)|) + 1 of a client with ``n_peers`` share holders."""
    return max(1, min(n_peers, int(math.floor(fraction * n_peers)) + 1))


# --- client side: protocol steps ----------------------------------------------------
def secagg_register(payload: Any, shared: Any, client: Any) -> dict[str, np.ndarray]:
    """Step 0: the client's long-lived public key c_u^PK."""
    return {"c_pk": np.frombuffer(_pk_bytes(_long_key(client)), dtype=np.uint8).copy()}


def secagg_share_keys(payload: dict[str, Any], shared: Any, client: Any) -> dict[str, np.ndarray]:
    """Step 1: fresh s_u and b_u, Shamir-shared among the peers and encrypted for each of them."""
    run, rnd, att = payload["run"], int(payload["round"]), int(payload["attempt"])
    peers = [int(p) for p in payload["peers"]]
    t = int(payload["t"])
    me = int(client.id)
    s_sk = X25519PrivateKey.generate()
    b = os.urandom(32)
    xs = [p + 1 for p in peers]
    s_shares = shamir_split(_sk_int(s_sk), xs, t)
    b_shares = shamir_split(int.from_bytes(b, "little"), xs, t)
    cts = np.zeros((len(peers), _CT_BYTES), dtype=np.uint8)
    for k, (p, cpk) in enumerate(zip(peers, payload["peer_cpk"])):
        plain = s_shares[p + 1].to_bytes(SHARE_BYTES, "little") + b_shares[p + 1].to_bytes(SHARE_BYTES, "little")
        nonce = os.urandom(12)
        ct = AESGCM(_share_key(client, p, bytes(cpk))).encrypt(nonce, plain, f"{run}/{rnd}/{att}/{me}/{p}".encode())
        cts[k] = np.frombuffer(nonce + ct, dtype=np.uint8)
    insts = client.secrets.setdefault("instances", {})
    while len(insts) >= _KEEP_INSTANCES:
        insts.pop(next(iter(insts)))
    insts[(run, rnd, att)] = {"s_sk": s_sk, "b": b, "revealed": {}}
    return {"c_pk": np.frombuffer(_pk_bytes(_long_key(client)), dtype=np.uint8).copy(),
            "s_pk": np.frombuffer(_pk_bytes(s_sk), dtype=np.uint8).copy(), "ct": cts}


def secagg_unmask(payload: dict[str, Any], shared: Any, client: Any) -> dict[str, np.ndarray]:
    """Step 3: shares of b_v for surviving senders and of s_v^SK for dropped ones, never both for one v."""
    run, rnd, att = payload["run"], int(payload["round"]), int(payload["attempt"])
    inst = client.secrets.get("instances", {}).get((run, rnd, att))
    survivors = {int(c) for c in payload["survivors"]}
    dropped = {int(c) for c in payload["dropped"]}
    out_ids, out_kind, out_shares = [], [], []
    if inst is None or "inbox" not in inst or len(survivors) < int(payload["min_survivors"]):
        return {"ids": np.zeros(0, np.int64), "kind": np.zeros(0, np.int8), "shares": np.zeros((0, SHARE_BYTES), np.uint8)}
    me = int(client.id)
    for sender, cpk, blob in inst["inbox"]:
        kind = 1 if sender in survivors else (0 if sender in dropped else -1)
        if kind < 0 or inst["revealed"].get(sender, kind) != kind:
            continue  # an honest client never reveals both secrets of one peer
        try:
            plain = AESGCM(_share_key(client, sender, cpk)).decrypt(
                blob[:12], blob[12:], f"{run}/{rnd}/{att}/{sender}/{me}".encode())
        except InvalidTag:  # encrypted for a key this client no longer holds (e.g. a restarted actor)
            continue
        inst["revealed"][sender] = kind
        part = plain[kind * SHARE_BYTES : (kind + 1) * SHARE_BYTES] if kind == 1 else plain[:SHARE_BYTES]
        out_ids.append(sender)
        out_kind.append(kind)
        out_shares.append(np.frombuffer(part, dtype=np.uint8))
    return {"ids": np.asarray(out_ids, np.int64), "kind": np.asarray(out_kind, np.int8),
            "shares": np.vstack(out_shares) if out_shares else np.zeros((0, SHARE_BYTES), np.uint8)}


def _small_cluster_guard(stats: Stats, min_count: float) -> tuple[Stats, int]:
    """Zero the clusters whose count is positive but below ``min_count``; returns them counted."""
    arrays = {k: np.array(stats[k], dtype=np.float64) for k in stats}
    hit = 0
    for s, c in CLUSTER_PAIRS.items():
        if s in arrays and c in arrays and arrays[c].ndim == 1 and arrays[s].shape[:1] == arrays[c].shape:
            small = (arrays[c] > 0) & (arrays[c] < min_count)
            if small.any():
                hit += int(small.sum())
                k = arrays[c].shape[0]
                for name, v in arrays.items():
                    if v.ndim >= 1 and v.shape[0] == k:
                        v[small] = 0.0
    return (Stats(**arrays) if hit else stats), hit


def count_small_clusters(stats: Any, below: float = 2.0) -> int:
    """Clusters of ``stats`` whose count is in (0, below): their sum is (nearly) one row."""
    if not isinstance(stats, Stats):
        return 0
    n = 0
    for s, c in CLUSTER_PAIRS.items():
        if s in stats and c in stats and np.ndim(stats[c]) == 1:
            cnt = np.asarray(stats[c])
            n += int(np.sum((cnt > 1e-9) & (cnt < below - 1e-9)))
    return n


def private_call(env: Envelope, shared: Any, client: Any) -> Any:
    """Client side of step 2: run the algorithm's function, then guard, clip and noise, and mask its statistics."""
    out = env.fn(env.payload, shared, client)
    ex = env.extra
    inst = None
    if ex.get("mask"):
        insts = client.secrets.get("instances", {})
        inst = insts.get((ex["run"], ex["round"], ex["attempt"]))
        if inst is not None:  # keep the ciphertexts addressed to this client for step 3
            inst["inbox"] = [(int(s), bytes(c), bytes(b)) for s, c, b in zip(ex["inbox_ids"].tolist(), ex["inbox_cpk"],
                                                                          ex["inbox_ct"])]
    if not isinstance(out, Stats):
        return out
    if ex.get("min_cluster_count"):
        out, _ = _small_cluster_guard(out, float(ex["min_cluster_count"]))
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
        if ex.get("seeded_noise"):  # debugging only: anyone with the seed can remove this noise
            rng = client_rng(client.seed, client.id, ex["round"], _DP_STREAM, ex["attempt"])
        else:
            rng = np.random.default_rng(_secrets.randbits(128))
        x = x + rng.normal(0.0, ex["dp_std"], size=x.size)
    if not ex.get("mask"):
        return out.with_flat(x)
    if inst is None:  # no keys for this instance: refuse rather than send the statistics unmasked
        return None
    if x.size and float(np.max(np.abs(x))) >= LIMIT:
        raise DataError(f"client {client.id}: a statistic of magnitude {float(np.max(np.abs(x))):.3g} is too large "
                        f"for secure aggregation (limit 2^150); scale the data (data.scale)")
    L = x.size
    y = [a + b for a, b in zip(encode(x), prg(inst["b"], L))]
    me = int(client.id)
    for p, pk in zip(ex["peers"].tolist(), ex["peer_spk"]):
        m = prg(pair_seed(inst["s_sk"], bytes(pk), ex["run"], ex["round"], ex["attempt"], me, p), L)
        y = [a + b for a, b in zip(y, m)] if me < p else [a - b for a, b in zip(y, m)]
    raw = b"".join((v % MOD).to_bytes(ENTRY_BYTES, "little") for v in y)
    return MaskedStats(np.frombuffer(raw, dtype=np.uint8).reshape(L, ENTRY_BYTES), layout_of(out))


# --- server side ----------------------------------------------------------------------
def mask_peers(cohort: list[int], neighbors: int | None, seed: int, round_: int, attempt: int) -> dict[int, list[int]]:
    """Mask peers of each client: everyone else, or ``neighbors`` peers on a seeded ring.

    The graph is public (the server chooses it, as in SecAgg+); no secret derives from it.
    """
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


def _new_account() -> dict[str, Any]:
    return {"rounds": [], "withheld": 0, "recovered_masks": 0, "reconstructed_keys": 0,
            "unprotected_messages": 0, "masked_messages": 0, "refused_rounds": 0,
            "protocol_messages": 0, "protocol_bytes": 0, "disclosures": {}}


class PrivacyLayer(ExecutorWrapper):
    """Executor layer: runs secure aggregation around each task, guards, noises and masks the
    clients' statistics, and unmasks the total on the server side before the algorithm sees it.

    Parameters
    ----------
    inner : Executor
    privacy : PrivacyConfig
    seed : int
        The experiment seed: it picks the public mask graph only; no secret derives from it.
    disclosures : dict of str to int, optional
        Disclosures counted before the run (the session's set-up), merged into the account.
    """

    def __init__(self, inner: Executor, privacy: Any, seed: int, disclosures: dict[str, int] | None = None) -> None:
        super().__init__(inner)
        self.cfg = privacy
        self.seed = int(seed)
        self.account: dict[str, Any] = _new_account()
        self.account["disclosures"] = dict(disclosures or {})
        self._round: int | None = None
        self._attempt = 0
        self._run = os.urandom(8).hex()  # protocol-instance label (public, not a secret)
        self._cpk: dict[int, bytes] = {}  # registered long-lived public keys (relayed, public)
        self.transcript: dict[str, Any] = {}  # what the server held in the last instance (audits, tests)

    def _disclose(self, kind: str, n: int) -> None:
        if n:
            d = self.account.setdefault("disclosures", {})
            d[kind] = int(d.get(kind, 0)) + int(n)

    def _protocol(self, round_: int, tasks: dict[int, Task], timeout: float | None) -> ExecResult:
        """One protocol step straight to the clients' hosts (the relay is simulated; see the module doc)."""
        res = self.base.execute(round_, tasks, timeout)
        self.account["protocol_messages"] += len(tasks) + len(res.replies)
        self.account["protocol_bytes"] += sum(nbytes_of(t.payload) for t in tasks.values())
        self.account["protocol_bytes"] += sum(nbytes_of(r.update) for r in res.replies)
        return res

    def execute(self, round_: int, tasks: dict[int, Task], timeout: float | None = None) -> ExecResult:
        self._attempt = self._attempt + 1 if round_ == self._round else 0
        self._round = round_
        cfg, attempt = self.cfg, self._attempt
        cohort = sorted(tasks)
        training = round_ >= 0
        sa = bool(cfg.secure_aggregation)
        dp = cfg.dp if training else None
        dp_std = None
        if dp is not None:
            dp_std = dp.noise_multiplier * dp.clip / (math.sqrt(len(cohort)) if sa else 1.0)
        extra_base: dict[str, Any] = {"round": round_, "attempt": attempt, "mask": sa,
                                      "guard": cfg.min_samples_guard and training,
                                      "min_cluster_count": cfg.min_cluster_count}
        if dp_std is not None:
            extra_base.update(dp_std=dp_std, clip=dp.clip, seeded_noise=bool(dp.seeded_noise))
        dropped_early: dict[int, str] = {}
        peers: dict[int, list[int]] = {}
        keys: dict[int, dict[str, Any]] = {}
        if sa:
            if len(cohort) < cfg.min_cohort:
                self.account["refused_rounds"] += 1
                raise RoundFailedError(
                    f"round {round_}: secure aggregation refused: a cohort of {len(cohort)} client(s) is below "
                    f"privacy.min_cohort={cfg.min_cohort} (its sum would reveal too much); sample more clients "
                    f"(federation.fraction) or lower privacy.min_cohort")
            peers, keys, dropped_early = self._share_keys(round_, attempt, cohort, timeout)
        sent = {}
        for cid in cohort:
            if cid in dropped_early:
                continue
            t = tasks[cid]
            extra = dict(extra_base)
            if sa:
                ps = peers[cid]
                inbox = [(s, keys[s]["ct"][keys[s]["peers"].index(cid)]) for s in ps if cid in keys[s]["peers"]]
                extra.update(run=self._run, peers=np.asarray(ps, dtype=np.int64),
                             peer_spk=np.stack([keys[p]["s_pk"] for p in ps]) if ps else np.zeros((0, 32), np.uint8),
                             inbox_ids=np.asarray([s for s, _ in inbox], dtype=np.int64),
                             inbox_cpk=np.stack([keys[s]["c_pk"] for s, _ in inbox]) if inbox else np.zeros((0, 32), np.uint8),
                             inbox_ct=np.stack([c for _, c in inbox]) if inbox else np.zeros((0, _CT_BYTES), np.uint8))
            sent[cid] = Task(private_call, Envelope(t.fn, t.payload, extra), t.shared, t.evaluation)
        res = self.inner.execute(round_, sent, timeout)
        for cid, why in dropped_early.items():
            res.failed.append(cid)
            res.errors[cid] = why
        res.failed.sort()
        acc = self.account
        n_stats = 0
        for r in res.replies:
            if r.update is None:
                acc["withheld"] += training and cfg.min_samples_guard
            elif isinstance(r.update, (Stats, MaskedStats)):
                n_stats += 1
                if isinstance(r.update, Stats) and dp_std is None and not cfg.min_cluster_count:
                    self._disclose("small_clusters", count_small_clusters(r.update))
            else:
                acc["unprotected_messages"] += 1
        if sa:
            self._unmask(res, peers, keys, round_, attempt, timeout)
        if cfg.min_samples_guard and training:
            self._fill_withheld(res, round_)
        if dp is not None and n_stats:
            answered = n_stats if sa else len(cohort)
            z = dp.noise_multiplier * (math.sqrt(answered / len(cohort)) if sa else 1.0)
            acc["rounds"].append({"round": round_, "attempt": attempt, "z": z})
        return res

    # --- SecAgg steps 0 and 1 -------------------------------------------------------------
    def _share_keys(self, round_: int, attempt: int, cohort: list[int], timeout: float | None
                    ) -> tuple[dict[int, list[int]], dict[int, dict[str, Any]], dict[int, str]]:
        dropped: dict[int, str] = {}
        unknown = [c for c in cohort if c not in self._cpk]
        if unknown:
            res = self._protocol(round_, {c: Task(secagg_register, None, None) for c in unknown}, timeout)
            for r in res.replies:
                self._cpk[r.client_id] = bytes(r.update["c_pk"])
            for c in unknown:
                if c not in self._cpk:
                    dropped[c] = f"client {c}: no answer to secure-aggregation registration"
        live = [c for c in cohort if c not in dropped]
        peers = mask_peers(live, self.cfg.mask_neighbors, self.seed, round_, attempt)
        tasks = {}
        for c in live:
            ps = peers[c]
            tasks[c] = Task(secagg_share_keys, {"run": self._run, "round": round_, "attempt": attempt, "peers": ps,
                                                "t": threshold(len(ps), self.cfg.secagg_threshold),
                                                "peer_cpk": [self._cpk[p] for p in ps]}, None)
        res = self._protocol(round_, tasks, timeout)
        keys: dict[int, dict[str, Any]] = {}
        for r in res.replies:
            u = r.update
            self._cpk[r.client_id] = bytes(u["c_pk"])
            keys[r.client_id] = {"s_pk": u["s_pk"], "c_pk": u["c_pk"], "ct": list(u["ct"]),
                                 "peers": list(tasks[r.client_id].payload["peers"]),
                                 "t": tasks[r.client_id].payload["t"]}
        for c in live:
            if c not in keys:
                dropped[c] = f"client {c}: no answer to secure-aggregation key sharing"
        # Clients that did not share their keys take no part: nobody masks with them.
        peers = {c: [p for p in peers[c] if p in keys] for c in keys}
        self.transcript = {"round": round_, "attempt": attempt, "run": self._run, "c_pk": dict(self._cpk),
                           "s_pk": {c: bytes(k["s_pk"]) for c, k in keys.items()},
                           "ciphertexts": {c: [bytes(x) for x in k["ct"]] for c, k in keys.items()},
                           "peers": {c: list(p) for c, p in peers.items()}, "masked": {}, "revealed": {}}
        return peers, keys, dropped

    # --- SecAgg step 3 --------------------------------------------------------------------
    def _unmask(self, res: ExecResult, peers: dict[int, list[int]], keys: dict[int, dict[str, Any]], round_: int,
                attempt: int, timeout: float | None) -> None:
        masked = [(k, r) for k, r in enumerate(res.replies) if isinstance(r.update, MaskedStats)]
        if not masked:
            return
        self.transcript["masked"] = {r.client_id: r.update for _, r in masked}
        layouts = {r.update.layout for _, r in masked}
        if len(layouts) > 1:
            raise RoundFailedError(f"round {round_}: secure aggregation needs one statistics layout per round; "
                                   f"clients sent {sorted(layouts)}")
        layout = layouts.pop()
        L = masked[0][1].update.data.shape[0]
        survivors = sorted(r.client_id for _, r in masked)
        surv = set(survivors)
        dropped = sorted(c for c in keys if c not in surv)
        why = None
        if len(survivors) < self.cfg.min_cohort:
            why = (f"only {len(survivors)} masked vector(s) arrived, below privacy.min_cohort={self.cfg.min_cohort}; "
                   f"their total would reveal too much")
        revealed_b: dict[int, dict[int, int]] = {}
        revealed_s: dict[int, dict[int, int]] = {}
        if why is None:
            payload = {"run": self._run, "round": round_, "attempt": attempt, "survivors": survivors,
                       "dropped": dropped, "min_survivors": self.cfg.min_cohort}
            out = self._protocol(round_, {c: Task(secagg_unmask, payload, None) for c in survivors}, timeout)
            for r in out.replies:
                u = r.update
                x = r.client_id + 1
                for target, kind, share in zip(u["ids"].tolist(), u["kind"].tolist(), u["shares"]):
                    (revealed_b if kind == 1 else revealed_s).setdefault(int(target), {})[x] = \
                        int.from_bytes(bytes(share), "little")
            need = [(c, "b", revealed_b.get(c, {})) for c in survivors]
            need += [(c, "s", revealed_s.get(c, {})) for c in dropped if any(p in surv for p in keys[c]["peers"])]
            short = [(c, kind, len(sh), keys[c]["t"]) for c, kind, sh in need if len(sh) < keys[c]["t"]]
            if short:
                c, kind, got, t = short[0]
                why = (f"only {got} of the {t} shares needed to recover client {c}'s "
                       f"{'self-mask' if kind == 'b' else 'pairwise-mask key'} were returned")
        if why is not None:  # discard the masked vectors: they are never unmasked
            self.account["refused_rounds"] += 1
            log.warning("round %d: secure aggregation refused: %s", round_, why)
            for _, r in masked:
                res.failed.append(r.client_id)
                res.errors[r.client_id] = f"round {round_}: secure aggregation refused: {why}"
            res.replies = [r for r in res.replies if not isinstance(r.update, MaskedStats)]
            res.failed.sort()
            return
        total = [0] * L
        for _, r in masked:
            total = [a + b for a, b in zip(total, r.update.ints())]
        for c in survivors:  # remove the self-masks PRG(b_u)
            b = shamir_combine(revealed_b[c], keys[c]["t"]).to_bytes(32, "little")
            total = [a - m for a, m in zip(total, prg(b, L))]
        self.transcript["revealed"] = {"b": sorted(survivors), "s": []}
        for v in dropped:  # masks that survivors share with clients whose vector did not arrive
            ups = [u for u in keys[v]["peers"] if u in surv]
            if not ups:
                continue
            sk = _sk_from_int(shamir_combine(revealed_s[v], keys[v]["t"]))
            if _pk_bytes(sk) != bytes(keys[v]["s_pk"]):
                raise RoundFailedError(f"round {round_}: secure aggregation: the key of client {v} reconstructed "
                                       f"from its shares does not match its public key")
            self.account["reconstructed_keys"] += 1
            self.transcript["revealed"]["s"].append(v)
            for u in ups:
                m = prg(pair_seed(sk, bytes(keys[u]["s_pk"]), self._run, round_, attempt, v, u), L)
                total = [(a - b) if u < v else (a + b) for a, b in zip(total, m)]
                self.account["recovered_masks"] += 1
        self.account["masked_messages"] += len(masked)
        tmpl = template(layout)
        summed = tmpl.with_flat(decode([t % MOD for t in total]))
        if not self.cfg.min_cluster_count:
            self._disclose("small_cluster_totals", count_small_clusters(summed))
        for n, (k, r) in enumerate(masked):
            res.replies[k] = Reply(r.client_id, summed if n == 0 else tmpl, r.seconds, r.nbytes)

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

    def report(self) -> dict[str, Any]:
        acc = {**self.account, "rounds": list(self.account["rounds"]),
               "disclosures": dict(self.account.get("disclosures", {}))}
        cfg = self.cfg
        acc["config"] = {"secure_aggregation": cfg.secure_aggregation, "mask_neighbors": cfg.mask_neighbors,
                         "min_cohort": cfg.min_cohort, "secagg_threshold": cfg.secagg_threshold,
                         "min_samples_guard": cfg.min_samples_guard, "min_cluster_count": cfg.min_cluster_count,
                         "dp": None if cfg.dp is None else cfg.dp.model_dump()}
        return {**self.inner.report(), "privacy": acc}

    def restore(self, report: dict[str, Any]) -> None:
        self.inner.restore(report)
        acc = dict(report.get("privacy", {}))
        acc.pop("config", None)
        if acc:
            self.account = {**_new_account(), **acc}


def secure_total(executor: Executor, privacy: Any, seed: int, tasks: dict[int, Task], round_: int) -> Stats:
    """The total of ``tasks``' statistics through secure aggregation alone (no noise, no guard).

    Used by the session for its set-up moments and plots. Raises
    :class:`~fedray.core.errors.RoundFailedError` if it is refused (cohort too small) or fails.
    """
    cfg = privacy.model_copy(update={"dp": None, "min_samples_guard": False, "min_cluster_count": 0,
                                     "secure_aggregation": True})
    layer = PrivacyLayer(executor, cfg, seed)
    res = layer.execute(round_, tasks, None)
    if res.user_errors:
        raise DataError(res.user_errors[min(res.user_errors)])
    if len(res.replies) < len(tasks):
        first = next(iter(res.errors.values()), "no reply")
        raise RoundFailedError(f"secure sum: {len(tasks) - len(res.replies)} of {len(tasks)} clients did not answer: "
                               f"{first.strip().splitlines()[-1] if first.strip() else first}")
    return sum((r.update for r in res.replies[1:]), start=res.replies[0].update)


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
        "protocol": "SecAgg (Bonawitz et al. 2017): X25519 + HKDF pairwise masks, double masking, "
                    "Shamir-shared dropout recovery" if cfg.get("secure_aggregation") else None,
        "mask_neighbors": cfg.get("mask_neighbors"),
        "min_cohort": cfg.get("min_cohort"),
        "secagg_threshold": cfg.get("secagg_threshold"),
        "min_samples_guard": bool(cfg.get("min_samples_guard")),
        "min_cluster_count": cfg.get("min_cluster_count", 0),
        "masked_messages": int(acc.get("masked_messages", 0)),
        "recovered_masks": int(acc.get("recovered_masks", 0)),
        "reconstructed_keys": int(acc.get("reconstructed_keys", 0)),
        "refused_rounds": int(acc.get("refused_rounds", 0)),
        "protocol_messages": int(acc.get("protocol_messages", 0)),
        "protocol_bytes": int(acc.get("protocol_bytes", 0)),
        "withheld": int(acc.get("withheld", 0)),
        "unprotected_messages": int(acc.get("unprotected_messages", 0)),
        "disclosures": {k: int(v) for k, v in sorted(acc.get("disclosures", {}).items())},
    }
    out["disclosures_total"] = int(sum(out["disclosures"].values()))
    dp = cfg.get("dp")
    if dp:
        zs = [r["z"] for r in acc.get("rounds", [])]
        eps, alpha = rdp_epsilon(zs, dp["delta"])
        seeded = bool(dp.get("seeded_noise"))
        out["dp"] = {"epsilon": eps, "delta": dp["delta"], "clip": dp["clip"], "noise_multiplier": dp["noise_multiplier"],
                     "noised_rounds": len(zs), "rdp_order": alpha, "unit": "client per round",
                     "mode": "distributed" if cfg.get("secure_aggregation") else "local",
                     "private": not seeded,
                     "noise": ("derived from the seed: not private (privacy.dp.seeded_noise, debugging only)" if seeded
                               else "drawn from the operating system's entropy on each client"),
                     "covers_all_messages": int(acc.get("unprotected_messages", 0)) == 0
                     and out["disclosures_total"] == 0}
    return out
