"""Privacy mechanisms for clients' summed statistics: secure aggregation (SecAgg),
differential privacy, the minimum-sample guard and the small-cluster guard.

They apply to every reply that is a :class:`~fedray.core.stats.Stats` (k-means sums and
counts, FCM weighted sums, evaluation tables...); other replies (local centres of a
k-FED start, model weights) pass unchanged and are counted as
``unprotected_messages`` in the summary's privacy account.

Secure aggregation (Bonawitz et al., CCS 2017, "Practical Secure Aggregation for
Privacy-Preserving Machine Learning", Fig. 4, honest-but-curious version with
double masking)
    Every call to clients (a :class:`~fedray.core.calls.Call`: every attempt of a
    round, every evaluation pass, every set-up or ad-hoc sum) runs one instance of the
    protocol on the cohort U. The layer numbers its instances (1, 2, ...) under a
    random public label ``run`` of its own, so no two instances share a label:

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

       with s_uv = HKDF-SHA256(X25519(s_u^SK, s_v^PK), info = run | instance | min(u,v) | max(u,v))
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
    is refused (:class:`~fedray.core.errors.ReleaseRefusedError`), and so is a call whose
    survivors are fewer than ``min_cohort`` or hold fewer than t shares of a
    secret the server needs: the masked vectors are then discarded, never
    unmasked. The masks' secrets never derive from the experiment seed, so the
    same seed gives the same result (the masks cancel exactly) while the masked
    messages differ from run to run. Only the public peer graph (who masks with
    whom under ``privacy.mask_neighbors``, SecAgg+ style) is seeded, by the call's
    :attr:`~fedray.core.calls.Call.stream_round` and attempt.

    :meth:`PrivacyLayer.secure_sum` runs one call through secure aggregation alone
    (whatever ``privacy.secure_aggregation`` says; no DP noise, no guard) and returns
    the total: the session's set-up moments and plots. It is counted in the same account.

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
    reproducible. ``dp.seeded_noise: true`` draws it from the seed instead (the
    client's stream of the call's ``stream_round`` and attempt), for debugging only: the account then says ``"private": false``. Without secure
    aggregation each client adds N(0, (z C)^2) to its own vector (local DP); with
    it, each adds N(0, (z C)^2 / |cohort|), so the total carries
    N(0, (z C)^2 a / |cohort|) for a answering clients (distributed DP). The unit is
    a client (its whole shard) per release. The account composes the noised releases (every
    attempt of every training round) with Google's ``dp-accounting`` (the ``privacy`` extra):
    each is a Gaussian mechanism of multiplier z_r / 2 under ``privacy.dp.adjacency =
    "replace-one"`` (the default: sensitivity 2C) or z_r under ``"add-remove"`` (sensitivity
    C); ``epsilon`` is the privacy-loss-distribution bound, ``epsilon_rdp`` the Rényi one,
    without amplification by sampling (an upper bound). Only training calls
    (:attr:`Call.training <fedray.core.calls.Call.training>`) are noised: evaluation passes,
    set-up and ad-hoc sums are not, and the summary lists them (``dp.unnoised_releases``).

Release rule (:mod:`~fedray.layers.privacy.release`)
    Under secure aggregation the layer never unmasks an un-noised sum with which some linear
    combination of the released sums of one quantity (least squares over the cohorts; names
    that encode the same quantity share one system) would be a sum over fewer than
    ``min_cohort`` clients: every atom of clients in exactly the same released cohorts keeps at
    least ``min_cohort`` clients. Otherwise the sum is narrowed (to whole fixed blocks under
    ``privacy.cohorts: blocks``, or to a released cohort) or refused: the run stops at once with
    :class:`~fedray.core.errors.ReleaseRefusedError` naming the run, the round, the clients a
    combination would single out and the fixes. A sum over fewer survivors than the call's quorum
    (:attr:`Call.quorum <fedray.core.calls.Call.quorum>`) is never unmasked; failed clients are asked
    again with the whole cohort, and clients left out of a sum still return their shares.

    The log is the federation's (:mod:`~fedray.layers.privacy.journal`): shared by every session
    over the same clients in the process and appended to a journal on disk before each sum is
    unmasked, so runs with other seeds, sweeps, Tune trials and resumed runs are weighed together; a
    resumed run releases a round again only over its first cohort. Fixed blocks derive from
    ``privacy.blocks_seed``, never from the run's seed, and an un-noised sum is always narrowed to
    the whole blocks that answered. A noised sum whose noise is too weak to count
    (:func:`~fedray.layers.privacy.dp.weak_noise`) is ruled as un-noised.

Per-cluster support
    Under secure aggregation without (effective) DP, each client adds ``_contributors`` (1 per
    cluster it has a point in) beside its crisp per-cluster sums; a per-cluster component with
    fewer than ``min_cohort`` contributors is zeroed before the algorithm sees it and counted
    (``low_support_clusters``).

Precision
    Fixed point keeps 2^-64 absolute per client; a non-zero statistic whose largest magnitude
    is below 2^-52 is refused by the client with a one-line error naming it.

Minimum-sample guard (Corcuera Bárcena et al. 2021, Section 4.2)
    In training calls a client withholds (replies ``None``) a statistic vector of length L unless
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

Modules
    :mod:`~fedray.layers.privacy.codec` (fixed-point encoding, :class:`MaskedStats`, the PRG),
    :mod:`~fedray.layers.privacy.shamir` (secret sharing), :mod:`~fedray.layers.privacy.keys`
    (X25519, HKDF, pairwise mask seeds, share encryption keys),
    :mod:`~fedray.layers.privacy.client` (the client side: steps 0, 1 and 3 and
    :func:`private_call` for step 2), :mod:`~fedray.layers.privacy.guards`,
    :mod:`~fedray.layers.privacy.dp` (clipping and noise), :mod:`~fedray.layers.privacy.accountant`
    (the account, the RDP epsilon, :func:`privacy_summary`) and :mod:`~fedray.layers.privacy.layer`
    (:class:`PrivacyLayer`: the server side). This module re-exports their public names.
"""
from __future__ import annotations

from fedray.layers.privacy.accountant import dp_epsilon, new_account, privacy_summary
from fedray.layers.privacy.client import (
    private_call,
    secagg_register,
    secagg_share_keys,
    secagg_unmask,
)
from fedray.layers.privacy.codec import (
    ENTRY_BYTES,
    FRAC_BITS,
    LIMIT,
    MOD,
    MOD_BITS,
    SCALE,
    MaskedStats,
    decode,
    encode,
    layout_of,
    prg,
    template,
)
from fedray.layers.privacy.guards import CLUSTER_PAIRS, count_small_clusters
from fedray.layers.privacy.keys import pair_seed
from fedray.layers.privacy.layer import PrivacyLayer, mask_peers
from fedray.layers.privacy.shamir import PRIME, SHARE_BYTES, shamir_combine, shamir_split, threshold

__all__ = [
    "CLUSTER_PAIRS", "ENTRY_BYTES", "FRAC_BITS", "LIMIT", "MOD", "MOD_BITS", "PRIME", "SCALE", "SHARE_BYTES",
    "MaskedStats", "PrivacyLayer", "count_small_clusters", "decode", "encode", "layout_of", "mask_peers",
    "dp_epsilon", "new_account", "pair_seed", "prg", "privacy_summary", "private_call", "secagg_register",
    "secagg_share_keys", "secagg_unmask", "shamir_combine", "shamir_split", "template", "threshold",
]
