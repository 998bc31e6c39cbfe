"""FLACC: federated learning via agglomerative client clustering (Mehta & Shao 2023).

Algorithm 1 of the paper, on the shared clustered-FL machinery of
:mod:`fedray.nn.supervised`:

* **Merging phase** — FedAvg with model averaging (line 20): each round the
  sampled clients train the global model for E epochs and send their weights;
  the server computes the cosine similarities of their weight updates
  Delta theta_i = theta_i - theta (eq. 19, stored for all sampled pairs as in
  eq. 8 with the round tau they were seen together) and greedily merges up to
  ``n_merge`` pairs of entities by max-min similarity (eq. 9-10) under
  alpha_min_cross > alpha_0 (eq. 15-17) and, for two subservers, Phi > 0
  (eq. 11-14). Pairs not sampled together within the last T rounds read -1
  and are ignored (system memory, eq. 18). The rules live in
  :mod:`fedray.algorithms.flacc_rules`.
* **Separation** — after ``n_sep`` consecutive rounds without a merge
  (line 5), every entity (a subserver or a lone client) becomes its own
  federation, starting from the global model, trained by FedAvg over its
  sampled members (lines 22-27) until ``federation.rounds`` (N_server).

**Control arm** (``control: random-groups``, not in the paper): the run is FLACC's, bit
for bit, up to separation; there the clients form random groups of the sizes of the
entities found (drawn from the run's seed) instead of the entities, each trained from
the global model with the same schedule and client seeds. Its accuracy against FLACC's
tells whether the clusters carry structure or FLACC only paid the cost of splitting;
``final["found_ari"]`` and ``["found_n_clusters"]`` keep what FLACC found.

**Gradient similarity** (``similarity: gradients``, the paper's Table VI): the server compares
the gradients of the clients' empirical risks at the model they received, grad F_i(theta)
(eq. 8), instead of their weight updates (eq. 19); the clients compute it over all their
training rows beside their usual training (:mod:`fedray.algorithms.flacc_client`). Each round of
the merging phase also records ``alpha_min_cross``, the value that solves (9) before the
merge conditions (the paper's Fig. 8).

Every merge is recorded (round, the two entities, alpha_min_cross, Phi) in
``result()["merges"]``; ``result()["similarity_mean"]`` (n, n) is the mean cosine
similarity of every pair of clients over the rounds of the merging phase in which
both were sampled (NaN: never together), ``["similarity_count"]`` those rounds; :func:`merge_table`
turns it into a DataFrame and
:func:`plot_clusters` draws the clusters found as in the paper's Fig. 4.
Defaults are the paper's (Section V-B): E = 5, B = 32, SGD lr 0.1, n_merge = 2,
T = 10, N_sep = 10, alpha_0 = 0, no warm-up (``warmup`` = w > 0, not in the paper, runs
w rounds of plain FedAvg before the first similarity is recorded; those rounds do
not count towards N_sep); the client fraction c and N_server are
``federation.fraction`` and ``federation.rounds``. No torch is imported here.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from fedray.algorithms.flacc_client import client_round_gradient
from fedray.algorithms.flacc_rules import (
    MergeEvent,
    SimilarityMemory,
    best_cross_similarity,
    entities,
    merge_round,
    random_groups,
)
from fedray.core.contract import FederationInfo, Reply, RoundContext, Task
from fedray.core.errors import ConfigError
from fedray.core.metrics import cluster_metrics
from fedray.core.registry import register
from fedray.core.sizes import nbytes_of
from fedray.nn.supervised import SupervisedAlgorithm, SupervisedParams


class FLACCParams(SupervisedParams):
    """Hyperparameters of FLACC (Algorithm 1); local training as in :class:`SupervisedParams`."""

    alpha_0: float = Field(default=0.0, gt=-1.0, le=1.0,
                           description="α₀, the server's merge threshold: two entities merge only "
                           "if their smallest cross cosine similarity exceeds it (eq. 16)")
    memory: int | None = Field(default=10, ge=1, description="T, the system memory in rounds: older similarities are "
                                    "forgotten (eq. 18); None = infinite")
    n_merge: int = Field(default=2, ge=1, description="n_merge, entity pairs merged per round at most")
    n_sep: int = Field(default=10, ge=1, description="N_sep, rounds without a merge before the entities "
                       "separate into their own federations")
    warmup: int = Field(default=0, ge=0, description="FedAvg rounds before the first similarity is recorded "
                                                     "(not in the paper, which merges from round 1: 0)")
    scan: bool = Field(default=True, description="when the best pair fails Φ > 0, try the next best pair "
                                                 "(False: stop, Algorithm 1 read literally)")
    similarity: Literal["updates", "gradients"] = Field(
        default="updates", description="what the server's cosine similarities compare: updates, the clients' weight "
        "updates Δθ_i = θ_i − θ (eq. 19, the paper's choice); gradients, the gradient of each client's empirical risk "
        "at the model it received, ∇F_i(θ) over all its training rows (eq. 8; the paper's Table VI). Clients train "
        "and send weights either way; with gradients a sampled client of the merging phase also sends its gradient "
        "(one more model-sized vector up)")
    control: Literal["none", "random-groups"] = Field(
        default="none", description="random-groups: the control arm; at separation the clients form random groups "
        "of the sizes of the entities found (seeded by the run's seed), trained as FLACC's clusters would be; the "
        "run is FLACC's up to separation, bit for bit (none: FLACC)")


#: ctx.rng sub-stream of the control arm's random groups
CONTROL_STREAM = 1


@register
class FLACC(SupervisedAlgorithm):
    """FLACC: FedAvg while agglomerating clients by update similarity, then one federation per entity."""

    name = "flacc"
    Params = FLACCParams
    description = "FLACC: greedy agglomerative client clustering, then one federation per cluster (Mehta & Shao 2023)"
    min_sampled: ClassVar[int] = 2

    def __init__(self, params: FLACCParams, info: FederationInfo, seed: int) -> None:
        super().__init__(params, info, seed)
        n = info.n_clients
        self.phase = "merging"
        self.memory = SimilarityMemory(n, params.memory)
        self.labels = np.arange(n, dtype=np.int64)  # entity of each client (its smallest client id)
        self.assignment = self.labels.copy()
        self.merges: list[MergeEvent] = []
        self.rounds_without_merge = 0
        self.separation_round: int | None = None
        # every similarity seen in the merging phase, summed per pair (a diagnostic of the
        # signal the merge rule works on: result()["similarity_mean"], ["similarity_count"])
        self.sim_sum = np.zeros((n, n))
        self.sim_count = np.zeros((n, n), dtype=np.int64)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # the server actor receives this object through Ray's object store, whose arrays are
        # read-only; the per-client arrays are updated in place during the run
        self.__dict__.update({k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in state.items()})

    @classmethod
    def check_config(cls, cfg: Any) -> None:
        """The base's checks; ``similarity: gradients`` is refused under privacy, whose layers protect the
        weights a client sends and not the gradient sent beside them."""
        super().check_config(cfg)
        if (cfg.algorithm.params or {}).get("similarity") == "gradients" and cfg.privacy.active:
            raise ConfigError("algorithm.params.similarity: 'gradients' sends each client's gradient beside its "
                              "weights, outside the privacy layers; use 'updates' with privacy")

    # --- rounds: every sampled client trains its entity's model ---
    def _gradients_due(self, ctx: RoundContext) -> bool:
        """Whether this round's sampled clients also send their risk gradient (``similarity: gradients``)."""
        return self.params.similarity == "gradients" and self.phase == "merging" and ctx.round >= self.params.warmup

    def configure_round(self, ctx: RoundContext) -> dict[int, Task] | None:
        if not self._gradients_due(ctx):
            return super().configure_round(ctx)
        self.check_round(ctx)
        return self.make_tasks(ctx, ctx.sampled, fn=client_round_gradient)

    def aggregate(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        extra: dict[str, float] = {}
        if self.phase == "merging":
            extra = self._merge_step(ctx, replies)
            extra["bytes_train"] = float(sum(nbytes_of(r.update.get("gradient")) for r in replies))
            self.average_into(replies)  # line 20: one global model
            if self.rounds_without_merge >= self.params.n_sep:
                self._separate(ctx)
        else:
            self.average_into(replies)  # lines 25-27: FedAvg inside each entity
        self.rounds_done += 1
        out = self.round_metrics(ctx, replies)
        out["bytes_train"] += extra.pop("bytes_train", 0.0)  # the gradients sent up, with similarity: gradients
        out.update(extra)
        return out

    def _merge_step(self, ctx: RoundContext, replies: list[Reply]) -> dict[str, float]:
        """Lines 10-19: similarities of this round's updates (or gradients), then up to n_merge merges.

        ``alpha_min_cross`` in the round's row is the value that solves (9) this round, before any
        merge and whether or not (14) and (16) let the pair merge (the paper's Fig. 8): the largest,
        over pairs of entities, of their smallest remembered cross similarity (NaN: no candidate pair)."""
        p = self.params
        if ctx.round < p.warmup:  # plain FedAvg: first updates share the common direction of learning the task
            return {"merges": 0.0, "merge_similarity": float("nan"), "n_entities": float(len(np.unique(self.labels))),
                    "alpha_min_cross": float("nan")}
        vectors = self.updates(replies) if p.similarity == "updates" else self.gradients(replies)
        ids = sorted(vectors)
        if len(ids) >= 2:
            S = self.memory.observe(ctx.round, ids, np.stack([vectors[c] for c in ids]))
            ix = np.ix_(ids, ids)
            self.sim_sum[ix] += S
            self.sim_count[ix] += 1
        best = best_cross_similarity(self.memory.alpha, self.memory.known(ctx.round), self.labels)
        self.labels, events = merge_round(self.memory, self.labels, ctx.round, alpha_0=p.alpha_0,
                                          n_merge=p.n_merge, scan=p.scan)
        self.memory.forget(ctx.round)
        self.merges.extend(events)
        self.rounds_without_merge = 0 if events else self.rounds_without_merge + 1
        self.assignment = self.labels.copy()
        sims = [e.similarity for e in events]
        return {"merges": float(len(events)), "merge_similarity": float(max(sims)) if sims else float("nan"),
                "n_entities": float(len(np.unique(self.labels))), "alpha_min_cross": best}

    @staticmethod
    def gradients(replies: list[Reply]) -> dict[int, np.ndarray]:
        """The risk gradients grad F_i(theta) (float64) the trained clients sent (``similarity: gradients``)."""
        return {r.client_id: np.asarray(r.update["gradient"], dtype=np.float64)
                for r in replies if "gradient" in r.update}

    def _separate(self, ctx: RoundContext) -> None:
        """Each entity becomes its own federation, starting from the global model (line 5, else branch).

        With ``control: random-groups`` the federations are random groups of the entities' sizes instead."""
        glob = self.models[0]
        groups = self.labels.copy()
        if self._control() == "random-groups":
            groups = random_groups(self.labels, ctx.rng(CONTROL_STREAM))
        self.models = {int(e): glob for e in np.unique(groups)}
        self.model_of = groups
        self.assignment = groups.copy()
        self.separation_round = int(ctx.round)
        self.phase = "separated"

    # --- results -------------------------------------------------------------
    def _control(self) -> str:
        """``params.control``: "none", or the control arm that replaces the clusters found at separation."""
        return self.params.control

    def _history(self) -> dict[str, Any]:
        out = {"merges": [e.to_dict() for e in self.merges], "separation_round": self.separation_round,
               "entities": [list(e) for e in entities(self.labels)], "control": self._control()}
        if self._control() != "none":  # what FLACC found, beside the groups trained (assignment, ari)
            out["found_n_clusters"] = int(len(np.unique(self.labels)))
            out.update({f"found_{k}": v for k, v in cluster_metrics(self.labels, self.true_groups).items()})
        return out

    def summarize_evaluation(self, stages: list[list[Reply]]) -> dict[str, Any]:
        out = super().summarize_evaluation(stages)
        out.update(n_merges=len(self.merges), **self._history())
        return out

    def result(self) -> dict[str, Any]:
        out = super().result()
        out.update(self._history())
        out["entity_of"] = self.labels.copy()
        with np.errstate(invalid="ignore", divide="ignore"):
            out["similarity_mean"] = np.where(self.sim_count > 0, self.sim_sum / self.sim_count, np.nan)
        out["similarity_count"] = self.sim_count.copy()
        return out


# --- reading the history ------------------------------------------------------
def merge_table(merges: list[dict[str, Any]] | list[MergeEvent]) -> pd.DataFrame:
    """One row per merge: round, first, second, merged, similarity (alpha_min_cross), phi, kind."""
    rows = [m.to_dict() if isinstance(m, MergeEvent) else dict(m) for m in merges]
    df = pd.DataFrame(rows, columns=["round", "first", "second", "similarity", "phi", "kind"])
    df["merged"] = [tuple(sorted(tuple(a) + tuple(b))) for a, b in zip(df["first"], df["second"])]
    return df


def plot_clusters(assignment: np.ndarray, true_groups: np.ndarray, n_samples: np.ndarray, *, ax: Any = None,
                  title: str = "", group_names: list[str] | None = None) -> Any:
    """Client clusters as in the paper's Fig. 4: one column of circles per cluster found,
    coloured by the client's true group and sized by its number of samples.

    Parameters
    ----------
    assignment : int array of shape (n_clients,)
        Cluster found for each client.
    true_groups : int array of shape (n_clients,)
    n_samples : array of shape (n_clients,)
    ax : matplotlib Axes, optional
    title : str
    group_names : list of str, optional
        Legend entries of the true groups.

    Returns
    -------
    matplotlib Axes
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    a, g, n = np.asarray(assignment), np.asarray(true_groups), np.asarray(n_samples, dtype=float)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6))
    cmap = plt.get_cmap("tab10")
    # clusters ordered by size (largest first), members by true group then id
    clusters = sorted(np.unique(a), key=lambda c: (-np.sum(a == c), c))
    per_row = 6
    size = 30 + 250 * (n - n.min()) / max(n.max() - n.min(), 1.0)
    for col, c in enumerate(clusters):
        members = sorted(np.flatnonzero(a == c), key=lambda i: (g[i], i))
        for k, i in enumerate(members):
            x = col * (per_row + 1) + k % per_row
            ax.scatter(x, -(k // per_row), s=size[i], color=cmap(int(g[i]) % 10), edgecolor="k", linewidth=0.4)
    names = group_names or [f"group {v}" for v in np.unique(g)]
    handles = [Line2D([], [], marker="o", ls="", color=cmap(int(v) % 10), label=nm)
               for v, nm in zip(np.unique(g), names)]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_xticks([col * (per_row + 1) + (per_row - 1) / 2 for col in range(len(clusters))])
    ax.set_xticklabels([f"cluster {j + 1}" for j in range(len(clusters))], fontsize=8)
    ax.set_yticks([])
    ax.set_title(title or f"{len(clusters)} clusters found (colour: true group, size: samples)")
    for s in ("top", "right", "left"):
        ax.spines[s].set_visible(False)
    return ax


def plot_accuracy(histories: dict[str, pd.DataFrame], *, ax: Any = None, separation_round: int | None = None,
                  title: str = "") -> Any:
    """Mean client test accuracy over rounds, one line per method (paper's Fig. 4, top)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.6))
    for name, h in histories.items():
        h = h[h["accuracy"].notna()] if "accuracy" in h else h.iloc[:0]
        ax.plot(h["round"], 100 * h["accuracy"], label=name, lw=1.5)
    if separation_round is not None:
        ax.axvline(separation_round, color="grey", ls=":", lw=1, label="separation")
    ax.set_xlabel("round")
    ax.set_ylabel("mean client test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return ax


__all__ = ["FLACC", "FLACCParams", "merge_table", "plot_accuracy", "plot_clusters"]
