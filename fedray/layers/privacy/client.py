"""The client side of the privacy protocols: the secure-aggregation steps 0, 1 and 3 and
:func:`private_call`, which wraps the algorithm's client function in step 2 (guards, clipping
and noise, masking). Every secret stays in ``client.secrets`` (see :mod:`fedray.layers.privacy`)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from fedray.core.errors import DataError
from fedray.core.stats import Stats
from fedray.layers.messages import Envelope
from fedray.layers.privacy.codec import (
    ENTRY_BYTES,
    FLOOR,
    LIMIT,
    MOD,
    MaskedStats,
    encode,
    layout_of,
    prg,
    too_small,
)
from fedray.layers.privacy.dp import clip_and_noise, noise_rng
from fedray.layers.privacy.guards import enough_samples, small_cluster_guard, with_contributors
from fedray.layers.privacy.keys import (
    CT_BYTES,
    long_key,
    pair_seed,
    pk_bytes,
    share_key,
    sk_int,
)
from fedray.layers.privacy.shamir import SHARE_BYTES, shamir_split

if TYPE_CHECKING:  # cryptography is imported on first use: only runs with secure aggregation need it
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

_KEEP_INSTANCES = 8  # protocol instances a client remembers (older ones are dropped)


def _public(sk: X25519PrivateKey) -> np.ndarray:
    return np.frombuffer(pk_bytes(sk), dtype=np.uint8).copy()


def secagg_register(payload: Any, shared: Any, client: Any) -> dict[str, np.ndarray]:
    """Step 0: the client's long-lived public key c_u^PK."""
    return {"c_pk": _public(long_key(client))}


def secagg_share_keys(payload: dict[str, Any], shared: Any, client: Any) -> dict[str, np.ndarray]:
    """Step 1: fresh s_u and b_u, Shamir-shared among the peers and encrypted for each of them."""
    run, inst = payload["run"], int(payload["instance"])
    peers = [int(p) for p in payload["peers"]]
    t = int(payload["t"])
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    me = int(client.id)
    s_sk = X25519PrivateKey.generate()
    b = os.urandom(32)
    xs = [p + 1 for p in peers]
    s_shares = shamir_split(sk_int(s_sk), xs, t)
    b_shares = shamir_split(int.from_bytes(b, "little"), xs, t)
    cts = np.zeros((len(peers), CT_BYTES), dtype=np.uint8)
    for k, (p, cpk) in enumerate(zip(peers, payload["peer_cpk"])):
        plain = s_shares[p + 1].to_bytes(SHARE_BYTES, "little") + b_shares[p + 1].to_bytes(SHARE_BYTES, "little")
        nonce = os.urandom(12)
        ct = AESGCM(share_key(client, p, bytes(cpk))).encrypt(nonce, plain, f"{run}/{inst}/{me}/{p}".encode())
        cts[k] = np.frombuffer(nonce + ct, dtype=np.uint8)
    insts = client.secrets.setdefault("instances", {})
    while len(insts) >= _KEEP_INSTANCES:
        insts.pop(next(iter(insts)))
    insts[(run, inst)] = {"s_sk": s_sk, "b": b, "revealed": {}}
    return {"c_pk": _public(long_key(client)), "s_pk": _public(s_sk), "ct": cts}


def secagg_unmask(payload: dict[str, Any], shared: Any, client: Any) -> dict[str, np.ndarray]:
    """Step 3: shares of b_v for surviving senders and of s_v^SK for dropped ones, never both for one v."""
    run, number = payload["run"], int(payload["instance"])
    inst = client.secrets.get("instances", {}).get((run, number))
    survivors = {int(c) for c in payload["survivors"]}
    dropped = {int(c) for c in payload["dropped"]}
    out_ids, out_kind, out_shares = [], [], []
    if inst is None or "inbox" not in inst or len(survivors) < int(payload["min_survivors"]):
        return {"ids": np.zeros(0, np.int64), "kind": np.zeros(0, np.int8), "shares": np.zeros((0, SHARE_BYTES), np.uint8)}
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    me = int(client.id)
    for sender, cpk, blob in inst["inbox"]:
        kind = 1 if sender in survivors else (0 if sender in dropped else -1)
        if kind < 0 or inst["revealed"].get(sender, kind) != kind:
            continue  # an honest client never reveals both secrets of one peer
        try:
            plain = AESGCM(share_key(client, sender, cpk)).decrypt(
                blob[:12], blob[12:], f"{run}/{number}/{sender}/{me}".encode())
        except InvalidTag:  # encrypted for a key this client no longer holds (e.g. a restarted actor)
            continue
        inst["revealed"][sender] = kind
        part = plain[kind * SHARE_BYTES : (kind + 1) * SHARE_BYTES] if kind == 1 else plain[:SHARE_BYTES]
        out_ids.append(sender)
        out_kind.append(kind)
        out_shares.append(np.frombuffer(part, dtype=np.uint8))
    return {"ids": np.asarray(out_ids, np.int64), "kind": np.asarray(out_kind, np.int8),
            "shares": np.vstack(out_shares) if out_shares else np.zeros((0, SHARE_BYTES), np.uint8)}


def _instance(client: Any, ex: dict[str, Any]) -> dict[str, Any] | None:
    """This call's protocol instance, keeping the ciphertexts addressed to the client for step 3."""
    inst = client.secrets.get("instances", {}).get((ex["run"], ex["instance"]))
    if inst is not None:
        inst["inbox"] = [(int(s), bytes(c), bytes(b)) for s, c, b in zip(ex["inbox_ids"].tolist(), ex["inbox_cpk"],
                                                                      ex["inbox_ct"])]
    return inst


def _mask(x: np.ndarray, inst: dict[str, Any], ex: dict[str, Any], me: int) -> np.ndarray:
    """y = enc(x) + PRG(b_u) +- the pairwise masks PRG(s_uv), as L rows of 32 bytes."""
    L = x.size
    y = [a + b for a, b in zip(encode(x), prg(inst["b"], L))]
    for p, pk in zip(ex["peers"].tolist(), ex["peer_spk"]):
        m = prg(pair_seed(inst["s_sk"], bytes(pk), ex["run"], ex["instance"], me, p), L)
        y = [a + b for a, b in zip(y, m)] if me < p else [a - b for a, b in zip(y, m)]
    raw = b"".join((v % MOD).to_bytes(ENTRY_BYTES, "little") for v in y)
    return np.frombuffer(raw, dtype=np.uint8).reshape(L, ENTRY_BYTES)


def _check_finite(out: Stats, x: np.ndarray, client: Any, ex: dict[str, Any]) -> None:
    if not np.all(np.isfinite(x)):
        bad = [k for k in sorted(out) if not np.all(np.isfinite(out[k]))]
        raise DataError(f"client {client.id}: statistics {bad} contain NaN or infinite values in "
                        f"{ex['label']}; check the data for huge values")


def private_call(env: Envelope, shared: Any, client: Any) -> Any:
    """Client side of step 2: run the algorithm's function, then guard, clip and noise, and mask its statistics."""
    out = env.fn(env.payload, shared, client)
    ex = env.extra
    inst = _instance(client, ex) if ex.get("mask") else None
    if not isinstance(out, Stats):
        return out
    if ex.get("min_cluster_count"):
        out, _ = small_cluster_guard(out, float(ex["min_cluster_count"]))
    x = out.flat()
    _check_finite(out, x, client, ex)
    if ex.get("guard") and not enough_samples(client.data.X, x.size):  # Corcuera Bárcena et al. 2021, Sec. 4.2
        return None
    if ex.get("dp_std") is not None:
        rng = noise_rng(client, bool(ex.get("seeded_noise")), ex["stream_round"], ex["attempt"])
        x = clip_and_noise(x, ex["clip"], ex["dp_std"], rng)
    if not ex.get("mask"):
        return out.with_flat(x)
    if inst is None:  # no keys for this instance: refuse rather than send the statistics unmasked
        return None
    if ex.get("support"):  # each cluster's contributors, summed beside the sums (per-cluster support)
        out = with_contributors(out)
        x = out.flat()
    if x.size and float(np.max(np.abs(x))) >= LIMIT:
        raise DataError(f"client {client.id}: a statistic of magnitude {float(np.max(np.abs(x))):.3g} is too large "
                        f"for secure aggregation (limit 2^150); scale the data (data.scale)")
    tiny = too_small(out, x)
    if tiny is not None:  # fixed point would lose it without a word
        raise DataError(f"client {client.id}: statistic {tiny[0]!r} in {ex['label']} is at most {tiny[1]:.3g}, below "
                        f"{FLOOR:.3g}: secure aggregation's fixed point (2^-64 absolute) would keep fewer than 12 "
                        f"significant bits of it; scale the data (data.scale: standard)")
    return MaskedStats(_mask(x, inst, ex, int(client.id)), layout_of(out))
