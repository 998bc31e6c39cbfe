"""The privacy account: what the layer counts (masked messages, recovered masks, refusals,
protocol traffic, withheld replies, disclosures, DP rounds), the Rényi-DP epsilon of the
noised rounds and the ``privacy`` part of ``summary.json``."""
from __future__ import annotations

import math
from typing import Any

import numpy as np


def new_account() -> dict[str, Any]:
    """An empty account (what :class:`~fedray.layers.privacy.layer.PrivacyLayer` counts)."""
    return {"rounds": [], "withheld": 0, "recovered_masks": 0, "reconstructed_keys": 0,
            "unprotected_messages": 0, "masked_messages": 0, "refused_rounds": 0,
            "protocol_messages": 0, "protocol_bytes": 0, "disclosures": {}, "releases": [],
            "release_rule": {"release": 0, "dp_covered": 0, "narrowed": 0, "refused": 0, "held": 0}}


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


def _dp_summary(acc: dict[str, Any], cfg: dict[str, Any], dp: dict[str, Any], disclosures_total: int) -> dict[str, Any]:
    zs = [r["z"] for r in acc.get("rounds", [])]
    eps, alpha = rdp_epsilon(zs, dp["delta"])
    seeded = bool(dp.get("seeded_noise"))
    return {"epsilon": eps, "delta": dp["delta"], "clip": dp["clip"], "noise_multiplier": dp["noise_multiplier"],
            "noised_rounds": len(zs), "rdp_order": alpha, "unit": "client per round",
            "mode": "distributed" if cfg.get("secure_aggregation") else "local",
            "private": not seeded,
            "noise": ("derived from the seed: not private (privacy.dp.seeded_noise, debugging only)" if seeded
                      else "drawn from the operating system's entropy on each client"),
            "covers_all_messages": int(acc.get("unprotected_messages", 0)) == 0 and disclosures_total == 0}


def privacy_summary(acc: dict[str, Any]) -> dict[str, Any]:
    """What ``summary.json`` reports under ``privacy``, from the account of
    :meth:`PrivacyLayer.report <fedray.layers.privacy.layer.PrivacyLayer.report>`."""
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
        out["dp"] = _dp_summary(acc, cfg, dp, out["disclosures_total"])
    return out
