"""FedCRef: unsupervised federated clustering with cluster-wise refinement (Pisa / IIT-CNR 2025).

A state machine on the shared round loop (Algorithm 1 of the paper):

``init``      each client clusters its own data (``dirty`` / ``kmeans`` / ``dec``);
``train``     Phase 1: one autoencoder per local cluster (active clients, and once
              more for a client that has just stopped refining);
``evaluate``  evaluation only (labels): contingency tables for ACC (eq. 6) and each
              cluster's majority class, for the metrics — never for decisions
              (except ``association="oracle"``, the perfect-association bound);
``exchange``  Phase 2: every client receives all cluster models and returns the
              statistic of eq. (2) for each (own cluster, foreign model); the server
              keeps pairs that pass the P-th percentile <= tau test (``normalisation``
              of the differences: the paper's min-max over the cluster, or an option) in both
              directions, links each cluster to the best qualifying cluster of each
              other client and takes components with >= 2 nodes as communities (eq. 3);
              skipped in the first ``local_refinements`` iterations (an option beyond
              the paper, default 0): there each client refines with its own models only;
``federate``  Phase 3: ``fed_rounds`` rounds of FedAvg, every community side by side,
              each starting from the model of its lowest (client, cluster) node (or a fresh
              seeded model, ``fed_start="fresh"``); refinement uses the aggregate (or the first
              member's locally trained copy, ``community_model="first-member"``);
``refine``    Phase 4 (Algorithm 2) on active clients; stability by Hungarian-matched
              agreement with the previous labels; stop when no client is active, when
              communities and isolated clusters change by <= ``stop_tol`` over
              ``stop_window`` iterations, or after ``max_iterations``.

One iteration takes at most ``4 + fed_rounds`` server rounds; the round budget
(:meth:`FedCRef.round_budget`, ``1 + max_iterations * (4 + fed_rounds)``) sizes
the round cap unless ``federation.rounds`` is set. The rules are in :mod:`fedray.algorithms.fedcref_rules`,
the client functions in :mod:`fedray.algorithms.fedcref_client`.
"""
from __future__ import annotations

import hashlib
import logging
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from fedray.algorithms import fedcref_client as fc
from fedray.algorithms.fedcref_rules import (
    association_quality,
    communities,
    global_stop,
    link_clusters,
)
from fedray.core.contract import Algorithm, Params, Reply, RoundContext, Task
from fedray.core.errors import ConfigError
from fedray.core.metrics import acc_from_table
from fedray.core.registry import register

log = logging.getLogger(__name__)
FRESH_STREAM = 17   # server sub-stream of the fresh community starts

#: The paper's association test and rules (``preset: paper``); the defaults are the tuned
#: dirty-start setting (docs/reproductions.md, "FedCRef 2025", "Defaults").
PAPER_PRESET: dict[str, Any] = {"normalisation": "cluster", "percentile": 75.0, "tau": 0.2, "fed_rounds": 15,
                                "min_active_iterations": 1, "fed_trim": 0.0, "ratio": 0.0}
#: The authors' public code as it runs (``preset: authors``): the paper's test with the code's strict ``<``,
#: no link where every difference is equal, the code's one-sided first-link scan and τ of its current
#: configuration; community training as its Flower server runs it (a fresh random model, 2 local epochs in
#: round 1 and 7 in rounds 2-15, the first member's fine-tuned copy as the community model).
AUTHORS_PRESET: dict[str, Any] = {**PAPER_PRESET, "tau": 0.25, "strict": True, "equal_differences": "fail",
                                  "link": "first-scan", "fed_epochs": 7, "fed_first_epochs": 2,
                                  "fed_start": "fresh", "community_model": "first-member"}
PRESETS: dict[str, dict[str, Any]] = {"paper": PAPER_PRESET, "authors": AUTHORS_PRESET}


class FedCRefParams(Params):
    init: Literal["dirty", "kmeans", "dec"] = Field("dirty", description="initial local clustering: dirty (true "
                                                    "labels with a share flipped), kmeans, or dec")
    dirtiness: float = Field(0.3, ge=0.0, lt=1.0, description="share of samples moved to another cluster (dirty)")
    local_k: int | Literal["true", "silhouette"] = Field("true", description="local clusters: given, the number of "
                                                         "classes the client holds, or chosen by silhouette")
    local_k_range: tuple[int, int] = Field((2, 5), description="[lo, hi] range searched when local_k is "
                                           "silhouette")
    preset: Literal["tuned", "paper", "authors"] = Field(
        "tuned", description="starting values of normalisation, percentile, tau, fed_rounds, min_active_iterations, "
        "fed_trim and ratio: tuned (the dirty-start setting measured on MNIST: relative, 95, 0.1, 40, 3, 0.2, 0.5) "
        "or paper (the paper's test and rules: cluster, 75, 0.2, 15, 1, 0, 0); authors: the authors' public code "
        "(paper with tau 0.25, strict, equal_differences fail, link first-scan, fed_epochs 7, fed_first_epochs 2, "
        "fed_start fresh, community_model first-member); parameters given explicitly override the preset's values")
    percentile: float = Field(95.0, gt=0.0, le=100.0, description="P: the P-th percentile of the normalised error "
                                                         "differences is tested against τ (paper: 75)")
    tau: float = Field(0.1, gt=0.0, le=1.0, description="τ, the association threshold (paper: 0.2)")
    normalisation: Literal["cluster", "errors", "relative", "tail"] = Field(
        "relative", description="how |e_own - e_other| is brought to [0, 1] before the percentile: min-max over the "
        "cluster's samples (cluster, the paper; its statistic falls as the cluster grows), by the range of both "
        "models' errors on the cluster, per sample by e_own + e_other (relative, independent of the cluster's size), "
        "or min-max with the maximum replaced by the one expected of 500 samples under an exponential tail (tail)")
    strict: bool = Field(False, description="the test passes when the statistic is < tau (the authors' code) "
                         "instead of <= tau (the paper's text)")
    equal_differences: Literal["pass", "fail"] = Field(
        "pass", description="when every error difference on a cluster is equal (min-max undefined): the statistic "
        "is 0 and the pair may link (pass), or NaN and it does not (fail, the authors' code)")
    stability: float = Field(0.8, gt=0.0, le=1.0, description="Hungarian-matched agreement of consecutive "
                                                          "labellings above which a client stops refining")
    local_refinements: int = Field(0, ge=0, description="iterations at the start in which no exchange is made and "
                                   "each client refines with its own models only (0: the paper, the first "
                                   "exchange follows Phase 1); on a dirty start a refinement first cleans the "
                                   "clusters the exchange compares (beyond the paper)")
    min_active_iterations: int = Field(3, ge=1, description="refinements a client makes before it may stop "
                                       "(1: the paper's rule, it may stop after its first)")
    link: Literal["best", "first", "mutual-best", "first-scan"] = Field(
        "best", description="which qualifying cluster of another client a cluster links to: the best, the first, "
        "only mutual best choices, or first-scan (the authors' code: for clients a < b, each cluster of a links to "
        "the first qualifying cluster of b)")
    ratio: float = Field(0.5, ge=0.0, lt=1.0, description="ratio test beyond the paper (0: off): also link two "
                         "clusters of different clients that fail τ when each is the other's best foreign match and "
                         "their statistic is at most this share of the best either reaches with a third client")
    candidates: Literal["all", "member", "replace"] = Field(
        "all", description="models a client refines with: its own and every community's (the paper); its own and "
        "those of the communities its clusters belong to (member); or every community's, with each community's "
        "model standing in for the client's own models of the clusters in it (replace)")
    association: Literal["reconstruction", "none", "oracle"] = Field(
        "reconstruction", description="reconstruction-error test (paper); none: refinement alone (ablation); oracle: "
        "true classes (an upper bound, uses labels)")
    hidden: tuple[int, ...] = Field((100, 64, 32), description="encoder layer widths of each cluster's autoencoder "
                                    "(mirrored in the decoder)")
    output: Literal["auto", "sigmoid", "linear"] = Field("auto", description="autoencoder output layer (auto: "
                                                         "sigmoid for features in [0, 1], else linear)")
    local_epochs: int = Field(20, ge=1, description="epochs of Phase 1 local autoencoder training")
    fed_rounds: int = Field(40, ge=1, description="FedAvg rounds of each community in Phase 3 (paper: 15, "
                            "tuned on 500 samples per class; with ~150 per cluster, 40 give the community "
                            "models about as many optimizer steps; see docs/reproductions.md)")
    fed_epochs: int = Field(1, ge=1, description="local epochs in each federated round")
    fed_first_epochs: int | None = Field(None, ge=1, description="local epochs in a community's first federated "
                                         "round (None: fed_epochs; the authors' code: 2, then 7)")
    fed_start: Literal["node", "fresh"] = Field("node", description="a community's starting model: the model of "
                                                "its lowest (client, cluster) node, or a fresh random one (the "
                                                "authors' code), seeded by the seed, round and community")
    community_model: Literal["aggregate", "first-member"] = Field(
        "aggregate", description="the community model refinement uses: the FedAvg aggregate of the last round, or "
        "the community's first member's locally trained copy from that round (the authors' code)")
    fed_trim: float = Field(0.2, ge=0.0, lt=1.0, description="share of a cluster's samples that a client leaves "
                            "out of each FedAvg round: those the current community model reconstructs worst, "
                            "most of them another class's on a dirty cluster (0: every sample, the paper)")
    batch_size: int = Field(32, ge=1, description="mini-batch size of autoencoder training")
    lr: float = Field(1e-3, gt=0.0, description="Adam learning rate of autoencoder training")
    stack_clients: Literal["gpu", "always", "never"] = Field(
        "gpu", description="train a host's cluster autoencoders together as one stacked network: on a GPU only, "
        "always, or never (client by client)")
    warm_start: bool = Field(False, description="start local training from the model that formed the cluster")
    max_iterations: int = Field(10, ge=1, description="cap on refinement iterations")
    stop_window: int = Field(3, ge=2, description="iterations over which the global stop rule compares "
                             "communities and isolated clusters")
    stop_tol: float = Field(0.1, ge=0.0, description="global stop when both counts change by at most this share "
                            "over stop_window iterations")
    dec_hidden: tuple[int, ...] = Field((128, 64, 10), description="encoder widths of DEC (init dec)")
    dec_pretrain_epochs: int = Field(30, ge=1, description="autoencoder pre-training epochs of DEC (init dec)")
    dec_epochs: int = Field(20, ge=0, description="clustering epochs of DEC after pre-training (init dec)")

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        """``preset: paper`` / ``authors`` fills in its values of the parameters not given explicitly."""
        if isinstance(data, dict) and data.get("preset") in PRESETS:
            return {**PRESETS[data["preset"]], **data}
        return data

    @field_validator("local_k")
    @classmethod
    def _k(cls, v: Any) -> Any:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be >= 1, 'true' or 'silhouette'")
        return v

    @field_validator("local_k_range")
    @classmethod
    def _range(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 2 <= v[0] <= v[1]:
            raise ValueError("must be [lo, hi] with 2 <= lo <= hi")
        return v


@register
class FedCRef(Algorithm):
    """FedCRef (see the module docstring)."""

    name = "fedcref"
    Params = FedCRefParams
    requires = ("torch",)  # trains autoencoders (fedray.core.extras: needs the nn extra)
    description = "federated clustering: per-cluster autoencoders, association, communities, refinement"

    def __init__(self, params: FedCRefParams, info, seed: int) -> None:
        super().__init__(params, info, seed)
        p = self.params
        out = p.output
        if out == "auto":
            out = "sigmoid" if np.min(info.feature_min) >= 0 and np.max(info.feature_max) <= 1 else "linear"
        self.spec = {"n_features": int(info.n_features), "hidden": tuple(p.hidden), "output": out, "seed": self.seed}
        self.phase = "init"
        self.iteration = 0
        self.k: dict[int, int] = {}
        self.weights: dict[int, np.ndarray] = {}
        self.active = set(range(info.n_clients))
        self.retrain: set[int] = set()
        self.owner = np.zeros(0, dtype=np.int64)
        self.node_class = np.zeros(0, dtype=np.int64)
        self.edges: list[tuple[int, int]] = []
        self.edge_history: list[list[tuple[int, int]]] = []
        self.groups: list[list[int]] = []
        self.community: np.ndarray | None = None
        self._fed_round = 0
        self._row: dict[str, float] = {}
        self.iterations: list[dict[str, float]] = []
        self.converged = False

    def validate(self) -> None:
        p = self.params
        if (p.init == "dirty" or p.local_k == "true" or p.association == "oracle") and not self.info.has_labels:
            raise ConfigError(f"algorithm.params: init={p.init!r}, local_k={p.local_k!r}, association="
                              f"{p.association!r} need labels; the data set has none (use init='kmeans' or 'dec' "
                              "with local_k='silhouette' or a number)")

    def round_budget(self) -> int | None:
        """The init round plus ``max_iterations`` iterations of train, evaluate, exchange,
        ``fed_rounds`` federation rounds and refine (phases without work are skipped)."""
        p = self.params
        return 1 + p.max_iterations * (4 + p.fed_rounds)

    # --- phases ---------------------------------------------------------------
    def _payload(self) -> dict[str, Any]:
        p = self.params
        return {"init": p.init, "dirtiness": p.dirtiness, "local_k": p.local_k, "k_range": list(p.local_k_range),
                "dec_hidden": list(p.dec_hidden), "output": self.spec["output"], "dec_pretrain_epochs":
                p.dec_pretrain_epochs, "dec_epochs": p.dec_epochs, "seed": self.seed}

    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:
        p = self.params
        while True:
            ph = self.phase
            if ph == "done":
                return None
            if ph == "init":
                reads = p.init == "dirty" or p.local_k == "true"
                task = Task(fc.fc_init, self._payload(), evaluation=reads)
                return {c: task for c in ctx.all_clients}
            if ph == "train":
                who = sorted(self.active | self.retrain) if self.iteration else list(ctx.all_clients)
                if who:
                    sh = {"spec": self.spec, "epochs": p.local_epochs, "batch_size": p.batch_size, "lr": p.lr,
                          "stack_clients": p.stack_clients}
                    return {c: Task(fc.fc_train, None, sh) for c in who}
                self.phase = "evaluate"
            elif ph == "evaluate":
                if self.info.has_labels:
                    task = Task(fc.fc_evaluate, {"n_classes": int(self.info.n_classes)}, evaluation=True)
                    return {c: task for c in ctx.all_clients}
                self._after_evaluate({})
            elif ph == "exchange":
                self._nodes()
                local = self.iteration < p.local_refinements   # no exchange yet: own models only
                if p.association == "reconstruction" and not local:
                    sh = {"spec": self.spec, "weights": self._stacked(), "owner": self.owner,
                          "percentile": p.percentile, "normalisation": p.normalisation,
                          "equal": 0.0 if p.equal_differences == "pass" else float("nan")}
                    return {c: Task(fc.fc_exchange, None, sh) for c in ctx.all_clients}
                self._associate(self._oracle_edges() if p.association == "oracle" and not local else [])
            elif ph == "federate":
                first = self._fed_round == 0
                sh = {"spec": self.spec, "community": self.community, "batch_size": p.batch_size, "lr": p.lr,
                      "epochs": p.fed_first_epochs if first and p.fed_first_epochs else p.fed_epochs,
                      "trim": p.fed_trim, "fresh": self._fresh_seeds(ctx) if first and p.fed_start == "fresh"
                      else None}
                jobs: dict[int, list[tuple[int, int]]] = {}
                for c, nodes in enumerate(self.groups):
                    for i in nodes:
                        jobs.setdefault(int(self.owner[i]), []).append((c, int(self.node_cluster[i])))
                return {cid: Task(fc.fc_federate, jobs[cid], sh) for cid in sorted(jobs)}
            elif ph == "refine":
                sh = {"spec": self.spec, "community": self.community, "stability": p.stability,
                      "may_stop": self.iteration + 1 >= p.min_active_iterations}
                member: dict[int, list[int]] = {}
                replaced: dict[int, list[int]] = {}
                for k, nodes in enumerate(self.groups):
                    for i in nodes:
                        member.setdefault(int(self.owner[i]), []).append(k)
                        replaced.setdefault(int(self.owner[i]), []).append(int(self.node_cluster[i]))
                return {c: Task(fc.fc_refine, {"warm": p.warm_start,
                                               "communities": sorted(set(member.get(c, [])))
                                               if p.candidates == "member" else None,
                                               "replaced": sorted(set(replaced.get(c, [])))
                                               if p.candidates == "replace" else None}, sh)
                        for c in sorted(self.active)}

    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        ph = self.phase
        if ph == "init":
            self.k = {r.client_id: int(r.update["k"]) for r in replies}
            self.phase = "train"
            return {"local_clusters": float(sum(self.k.values()))}
        if ph == "train":
            for r in replies:
                self.weights[r.client_id] = r.update["weights"]
                self.k[r.client_id] = int(r.update["weights"].shape[0])
            self.retrain.clear()
            self.phase = "evaluate"
            return {"iteration": float(self.iteration), "trained_clients": float(len(replies))}
        if ph == "evaluate":
            return self._after_evaluate({r.client_id: r.update for r in replies})
        if ph == "exchange":
            M = len(self.owner)
            S = np.full((M, M), np.nan)
            for r in replies:
                rows = np.flatnonzero(self.owner == r.client_id)
                S[rows] = r.update[: rows.size]
            self.last_statistics = S
            return self._associate(link_clusters(S, self.owner, self.params.tau, self.params.link,
                                                 self.params.ratio, self.params.strict))
        if ph == "federate":
            num = np.zeros(self.community.shape, dtype=np.float64)
            den = np.zeros(len(self.groups))
            for r in replies:
                c_of = [c for (c, _p) in _client_jobs(self, r.client_id)]
                for j, c in enumerate(c_of):
                    num[c] += r.update["n"][j] * r.update["weights"][j].astype(np.float64)
                    den[c] += r.update["n"][j]
            ok = den > 0
            self.community[ok] = (num[ok] / den[ok, None]).astype(np.float32)
            self._fed_round += 1
            if self._fed_round >= self.params.fed_rounds:
                if self.params.community_model == "first-member":
                    self._first_member_models(replies)
                self.phase = "refine"
            return {"fed_round": float(self._fed_round)}
        return self._after_refine(replies)

    # --- helpers ----------------------------------------------------------------
    def _fresh_seeds(self, ctx: RoundContext) -> np.ndarray:
        """One seed of a fresh starting model per community (``fed_start="fresh"``), from the seed and round."""
        return ctx.rng(FRESH_STREAM).integers(0, 2**31 - 1, size=len(self.groups))

    def _first_member_models(self, replies: list[Reply]) -> None:
        """``community_model="first-member"``: each community's model is its first (lowest) node's locally
        trained copy of the last round, as the authors' code takes it, not the aggregate."""
        by_client = {r.client_id: r for r in replies}
        for c, nodes in enumerate(self.groups):
            cid, cluster = int(self.owner[nodes[0]]), int(self.node_cluster[nodes[0]])
            j = _client_jobs(self, cid).index((c, cluster))
            self.community[c] = by_client[cid].update["weights"][j]

    def _nodes(self) -> None:
        pairs = [(c, k) for c in sorted(self.k) for k in range(self.k[c])]
        self.owner = np.array([c for c, _ in pairs], dtype=np.int64)
        self.node_cluster = np.array([k for _, k in pairs], dtype=np.int64)

    def _stacked(self) -> np.ndarray:
        return np.vstack([self.weights[c] for c in sorted(self.k)])

    def _after_evaluate(self, tables: dict[int, np.ndarray]) -> dict[str, float]:
        self._tables = tables
        self._nodes()
        cls = []
        for c in sorted(self.k):
            t = tables.get(c)
            cls.extend(np.where(t.sum(1) > 0, t.argmax(1), -1).tolist() if t is not None else [-1] * self.k[c])
        self.node_class = np.array(cls, dtype=np.int64)
        accs = [acc_from_table(t) for _, t in sorted(tables.items())]
        self._row = {"iteration": float(self.iteration), "acc_mean": float(np.mean(accs)) if accs else np.nan,
                     "n_clusters": float(len(self.owner))}
        self.phase = "exchange"
        return dict(self._row)

    def _oracle_edges(self) -> list[tuple[int, int]]:
        M, c = len(self.owner), self.node_class
        return [(i, j) for i in range(M) for j in range(i + 1, M)
                if c[i] >= 0 and c[i] == c[j] and self.owner[i] != self.owner[j]]

    def _associate(self, edges: list[tuple[int, int]]) -> dict[str, float]:
        self.edges = edges
        self.edge_history.append(list(edges))
        self.groups, _ = communities(len(self.owner), edges)
        W = self._stacked()
        self.community = np.stack([W[g[0]] for g in self.groups]) if self.groups else None
        q = association_quality(edges, self.groups, self.node_class, len(self.owner))
        if not self.info.has_labels:
            q = {k: v for k, v in q.items() if k in ("isolated_clusters", "communities", "edges")}
        self._row.update(q)
        self._fed_round = 0
        self.phase = "federate" if self.groups else "refine"
        return q

    def _after_refine(self, replies: list[Reply]) -> dict[str, float]:
        p = self.params
        for r in replies:
            if not r.update["active"]:
                self.active.discard(r.client_id)
                self.retrain.add(r.client_id)
            self.k[r.client_id] = int(r.update["k"])
        stab = [r.update["stability"] for r in replies]
        self._row.update(active_clients=float(len(self.active)), stability_mean=float(np.mean(stab)) if stab else 1.0)
        self.iterations.append(dict(self._row))
        log.info("fedcref iteration %d: %s", self.iteration, {k: round(v, 3) for k, v in self._row.items()})
        self.iteration += 1
        comm = [int(r.get("communities", 0)) for r in self.iterations]
        iso = [int(r.get("isolated_clusters", 0)) for r in self.iterations]
        stop_rule = p.association != "none" and global_stop(comm, iso, p.stop_window, p.stop_tol)
        if not self.active or stop_rule or self.iteration >= p.max_iterations:
            self.phase, self.converged = "done", not self.active or stop_rule
            self.stop_reason = "no active clients" if not self.active else ("stable communities" if stop_rule
                                                                            else "max_iterations")
        else:
            self.phase = "train"
        return {"active_clients": float(len(self.active)), "stability_mean": self._row["stability_mean"]}

    # --- evaluation and result -------------------------------------------------
    def evaluation_task(self, stage: int = 0, previous: list[Reply] | None = None) -> Task | None:
        if stage == 0 and self.info.has_labels and self.k:
            return Task(fc.fc_evaluate, {"n_classes": int(self.info.n_classes)}, evaluation=True)
        return None

    def summarize_evaluation(self, stages: list[list[Reply]]) -> dict[str, Any]:
        accs = np.array([acc_from_table(r.update) for r in stages[0]])
        it = self.iterations
        first, last = (it[0], it[-1]) if it else ({}, {})
        exchange = it[min(self.params.local_refinements, len(it) - 1)] if it else {}   # the first exchange
        out: dict[str, Any] = {"acc": float(accs.mean()), "acc_start": first.get("acc_mean", np.nan),
                               "acc_end": float(accs.mean()), "client_acc": accs.tolist(),
                               "iterations": len(it), "stop_reason": getattr(self, "stop_reason", "")}
        for key in ("communities", "wrong_associations", "isolated_clusters", "classes_covered",
                    "pure_communities", "edges"):
            out[f"{key}_start"], out[f"{key}_end"] = exchange.get(key, np.nan), last.get(key, np.nan)
        if self.phase != "done":
            out["stop_reason"] = "round cap"  # federation.rounds ended it mid-iteration
        warnings = []
        if out["stop_reason"] == "no active clients":
            warnings.append(f"fedcref stopped after {len(it)} iteration(s) with no active clients: every client's "
                            f"labels agreed with its previous ones above stability={self.params.stability} (raise "
                            "stability or min_active_iterations to refine longer)")
        if out["stop_reason"] == "round cap":
            warnings.append(f"fedcref was stopped by federation.rounds in iteration {len(it) + 1} (one iteration is "
                            f"4 + fed_rounds = {4 + self.params.fed_rounds} rounds); raise federation.rounds")
        if it and self.params.association != "none" and max(int(r.get("communities", 0)) for r in it) == 0:
            warnings.append("fedcref formed no community: no cluster was associated with another client's, so "
                            f"nothing was federated (no pair passed P{self.params.percentile:g} <= "
                            f"tau={self.params.tau:g} in both directions)")
        for w in warnings:
            if out["stop_reason"] != "round cap" or "federation.rounds" not in w:
                log.warning(w)  # the round loop has already warned about the cap, in one line
        out["warnings"] = warnings
        held = self.info.extras.get("client_classes")
        out["true_categories"] = len(set().union(*map(set, held))) if held else int(self.info.n_classes or 0)
        out["history"] = [dict(r) for r in it]
        return out

    def result(self) -> dict[str, Any]:
        W = self._stacked() if self.weights else np.zeros((0, 0), np.float32)
        return {
            "community_weights": self.community
            if self.community is not None
            else np.zeros((0, W.shape[1]), np.float32),
            "node_owner": self.owner,
            "node_cluster": getattr(self, "node_cluster", np.zeros(0, np.int64)),
            "edges": np.asarray(self.edges, dtype=np.int64).reshape(-1, 2),
            "communities": [list(map(int, g)) for g in self.groups],
            "node_weights_sha1": hashlib.sha1(W.tobytes()).hexdigest(),
            "edge_history": [list(map(list, e)) for e in self.edge_history],
            "node_class": self.node_class,  # majority true class of each node (evaluation only)
            "iterations": [dict(r) for r in self.iterations],
            "autoencoder": dict(self.spec),
        }


def _client_jobs(alg: FedCRef, cid: int) -> list[tuple[int, int]]:
    """The (community, cluster) jobs of client ``cid`` in the current federated round, in task order."""
    return [(c, int(alg.node_cluster[i])) for c, nodes in enumerate(alg.groups) for i in nodes
            if int(alg.owner[i]) == cid]
