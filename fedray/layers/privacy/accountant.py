"""The privacy account: what the layer counts (masked messages, recovered masks, refusals,
protocol traffic, withheld replies, disclosures, DP rounds, every release of statistics and
what the release rule did), the epsilon of the noised releases (``dp-accounting``, the
``privacy`` extra) and the ``privacy`` part of ``summary.json``."""
from __future__ import annotations

from typing import Any


def new_account() -> dict[str, Any]:
    """An empty account (what :class:`~fedray.layers.privacy.layer.PrivacyLayer` counts)."""
    return {"rounds": [], "withheld": 0, "recovered_masks": 0, "reconstructed_keys": 0,
            "unprotected_messages": 0, "masked_messages": 0, "refused_rounds": 0, "low_support_clusters": 0,
            "weak_noise": 0,
            "protocol_messages": 0, "protocol_bytes": 0, "disclosures": {}, "releases": [],
            "release_rule": {"release": 0, "dp_covered": 0, "narrowed": 0, "refused": 0, "held": 0}}


#: Adjacency of the guarantee -> the L2 sensitivity of a client's clipped vector, in units of the clip C.
SENSITIVITY = {"replace-one": 2.0, "add-remove": 1.0}


def dp_epsilon(zs: list[float], delta: float, adjacency: str = "replace-one") -> dict[str, float]:
    """Epsilon of the Gaussian mechanism composed over releases with noise multipliers ``zs``
    (noise std z C), computed with Google's ``dp-accounting``: the privacy-loss-distribution
    accountant (``epsilon``, tight) and the Rényi accountant (``epsilon_rdp``, a looser bound).

    Under ``adjacency="replace-one"`` (a client's data replaced: sensitivity 2C) each release is a
    Gaussian mechanism of multiplier z / 2; under ``"add-remove"`` (a client added or removed:
    sensitivity C), of multiplier z. No amplification by sampling: an upper bound.
    """
    if not zs:
        return {"epsilon": 0.0, "epsilon_rdp": 0.0}
    from dp_accounting import dp_event, pld, rdp

    per = SENSITIVITY[adjacency]
    counts: dict[float, int] = {}
    for z in zs:
        counts[float(z) / per] = counts.get(float(z) / per, 0) + 1
    event = dp_event.ComposedDpEvent([dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(z), n)
                                      for z, n in sorted(counts.items())])
    loose = _or_inf(lambda: rdp.RdpAccountant().compose(event).get_epsilon(delta))
    tight = _or_inf(lambda: pld.PLDAccountant().compose(event).get_epsilon(delta))
    return {"epsilon": float(min(tight, loose)), "epsilon_rdp": float(loose)}


def _or_inf(fn: Any) -> float:
    """``fn()``, or infinity where the accountant cannot represent the loss (noise multipliers near 0)."""
    try:
        return float(fn())
    except (OverflowError, ValueError, ZeroDivisionError):
        return float("inf")


def _exact_releases(acc: dict[str, Any]) -> dict[str, int]:
    """Releases of statistics without DP noise, per call kind (what the (epsilon, delta) does not cover)."""
    out: dict[str, int] = {}
    for r in acc.get("releases", []):
        if not r["noised"]:
            out[r["kind"]] = out.get(r["kind"], 0) + 1
    return out


def _dp_summary(acc: dict[str, Any], cfg: dict[str, Any], dp: dict[str, Any], disclosures_total: int) -> dict[str, Any]:
    zs = [r["z"] for r in acc.get("rounds", [])]
    adjacency = dp.get("adjacency", "replace-one")
    eps = dp_epsilon(zs, dp["delta"], adjacency)
    seeded = bool(dp.get("seeded_noise"))
    exact = _exact_releases(acc)
    return {**eps, "delta": dp["delta"], "clip": dp["clip"], "noise_multiplier": dp["noise_multiplier"],
            "adjacency": adjacency, "sensitivity": f"{SENSITIVITY[adjacency]:g} * clip",
            "accountant": "dp-accounting: privacy loss distribution (epsilon), Renyi DP (epsilon_rdp)",
            "noised_rounds": len(zs), "unit": "client per release",
            "covers": "training rounds (every attempt); evaluation, set-up and ad-hoc statistics are not noised",
            "unnoised_releases": exact,
            "mode": "distributed" if cfg.get("secure_aggregation") else "local",
            "private": not seeded,
            "noise": ("derived from the seed: not private (privacy.dp.seeded_noise, debugging only)" if seeded
                      else "drawn from the operating system's entropy on each client"),
            "covers_all_messages": (int(acc.get("unprotected_messages", 0)) == 0 and disclosures_total == 0
                                    and not exact)}


def release_counts(acc: dict[str, Any]) -> dict[str, Any]:
    """Statistics released to the server, per call kind: ``summed`` (secure sums) or per-client, and noised."""
    out: dict[str, Any] = {}
    for r in acc.get("releases", []):
        k = out.setdefault(r["kind"], {"calls": 0, "summed": 0, "noised": 0})
        k["calls"] += 1
        k["summed"] += bool(r["summed"])
        k["noised"] += bool(r["noised"])
    return out


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
        # per-cluster components of secure sums from fewer than min_cohort contributors: zeroed
        "low_support_clusters": int(acc.get("low_support_clusters", 0)),
        # noised sums whose noise was too weak to count (dp.WEAK_NOISE_EPSILON): ruled as un-noised
        "weak_noise": int(acc.get("weak_noise", 0)),
        "disclosures": {k: int(v) for k, v in sorted(acc.get("disclosures", {}).items())},
        "release_rule": {"mode": cfg.get("release_rule", "strict"), "min_difference": cfg.get("min_cohort"),
                         **{k: int(v) for k, v in acc.get("release_rule", {}).items()}},
        "releases": release_counts(acc),
    }
    out["disclosures_total"] = int(sum(out["disclosures"].values()))
    dp = cfg.get("dp")
    if dp:
        out["dp"] = _dp_summary(acc, cfg, dp, out["disclosures_total"])
    return out
