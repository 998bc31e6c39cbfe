"""Key agreement for secure aggregation: X25519 key pairs, HKDF-SHA256, pairwise mask seeds and
the keys that encrypt Shamir shares (AES-GCM) between two clients, and the public mask graph
(:func:`mask_peers`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedray.core.seeding import MASK_RING_STREAM, server_rng
from fedray.layers.privacy.shamir import SHARE_BYTES

if TYPE_CHECKING:  # cryptography is imported on first use: only runs with secure aggregation need it
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

CT_BYTES = 12 + 2 * SHARE_BYTES + 16  # nonce, two shares (s_sk, b), GCM tag


def pk_bytes(sk: X25519PrivateKey) -> bytes:
    """The raw 32-byte public key of ``sk``."""
    from cryptography.hazmat.primitives import serialization

    return sk.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def sk_int(sk: X25519PrivateKey) -> int:
    """The private key as a little-endian integer (the secret that is Shamir-shared)."""
    from cryptography.hazmat.primitives import serialization

    raw = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    return int.from_bytes(raw, "little")


def sk_from_int(v: int) -> X25519PrivateKey:
    """The private key back from :func:`sk_int`."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    return X25519PrivateKey.from_private_bytes(int(v).to_bytes(32, "little"))


def kdf(secret: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 of ``secret`` to 32 bytes, bound to ``info``."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def instance_info(kind: bytes, run: str, instance: int, i: int, j: int) -> bytes:
    """HKDF ``info`` of a key of ``kind`` for the pair (i, j) in protocol instance ``instance`` of the
    layer labelled ``run`` (both public; every call to clients under secure aggregation is one instance)."""
    lo, hi = (i, j) if i < j else (j, i)
    return b"fedray-secagg/" + kind + f"/{run}/{instance}/{lo}/{hi}".encode()


def pair_seed(sk: X25519PrivateKey, peer_pk: bytes, run: str, instance: int, me: int, peer: int) -> bytes:
    """s_uv: HKDF-SHA256 of the X25519 agreement, bound to the protocol instance and the pair."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

    shared = sk.exchange(X25519PublicKey.from_public_bytes(bytes(peer_pk)))
    return kdf(shared, instance_info(b"mask", run, instance, me, peer))


def long_key(client: Any) -> X25519PrivateKey:
    """The client's long-lived key pair for encrypting shares (drawn from the OS on first use)."""
    sec = client.secrets
    if "c_sk" not in sec:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        sec["c_sk"] = X25519PrivateKey.generate()
    return sec["c_sk"]


def share_key(client: Any, peer: int, peer_cpk: bytes) -> bytes:
    """The AES-GCM key between ``client`` and ``peer`` (long-lived keys; cached in the client's secrets)."""
    cache = client.secrets.setdefault("share_keys", {})
    key = (peer, bytes(peer_cpk))
    if key not in cache:
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

        shared = long_key(client).exchange(X25519PublicKey.from_public_bytes(bytes(peer_cpk)))
        cache[key] = kdf(shared, instance_info(b"share", "", 0, int(client.id), int(peer)))
    return cache[key]


def mask_peers(cohort: list[int], neighbors: int | None, seed: int, round_: int, attempt: int) -> dict[int, list[int]]:
    """Mask peers of each client: everyone else, or ``neighbors`` peers on a ring seeded by
    (``seed``, ``round_``, ``attempt``); the layer passes a call's
    :attr:`~fedray.core.calls.Call.stream_round` and attempt.

    The graph is public (the server chooses it, as in SecAgg+); no secret derives from it.
    """
    n = len(cohort)
    if neighbors is None or neighbors >= n - 1:
        return {c: [p for p in cohort if p != c] for c in cohort}
    order = [cohort[k] for k in server_rng(seed, round_, MASK_RING_STREAM, attempt).permutation(n)]
    h = max(1, neighbors // 2)
    peers: dict[int, set[int]] = {c: set() for c in cohort}
    for pos, c in enumerate(order):
        for s in range(1, h + 1):
            peers[c].add(order[(pos + s) % n])
            peers[c].add(order[(pos - s) % n])
    return {c: sorted(p) for c, p in peers.items()}
