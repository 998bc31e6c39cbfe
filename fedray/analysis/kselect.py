"""Choosing the number of clusters K (Stallmann & Wilbik, 2022, Section 2.2.3).

For every K in [K_min, K_max] the configured algorithm runs on the same clients
(one :class:`~fedray.api.session.Session`: shards and actors are built once, only
the algorithm's state is new for each K) and the federated validation index of
its centres is computed from per-client sums (:mod:`fedray.analysis.validation`):
FedFuzzDB for fuzzy algorithms, the crisp federated Davies–Bouldin index for the
k-means family. The chosen K is the minimum of the index (``method="min"``) or
the elbow of its curve (``method="elbow"``).

For comparison in simulations, two baselines are computed per K:

* ``central`` — the non-federated algorithm (fuzzy c-means, or k-means for crisp
  indices) on the union of the shards, with the index on the union. It keeps the
  best of ``n_init`` starts (default 10, scikit-learn's ``n_init``): each start is
  k-means++ refined by Lloyd's k-means, then FCM from there, and the run with the
  lowest FCM objective J_m wins (for crisp indices: the lowest k-means inertia).
  A bare k-means++ start reaches the K = 5 optimum of the motivational example in
  only about 40% of tries; a Lloyd-refined one in nearly all.
* ``local`` — every client alone clusters its shard and computes the index on it
  (a client task; only the index values leave the client), and picks its own K.
  The local range of K is ``local_k_range``; by default the data set's own
  (``scenario:stallmann-motivational`` carries the paper's 2..5) or [K_min, K_max].

Outputs: ``k_selection.parquet`` (one row per K), ``k_selection.json`` (chosen K
per curve), ``k_selection.md`` and ``plots/k_selection.png``.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fedray.algorithms.fedfuzzdb import crisp_davies_bouldin, fuzzy_davies_bouldin
from fedray.analysis.validation import federated_crisp_db, federated_fuzzy_db
from fedray.api.config import make_config
from fedray.api.outputs import prepare, record, release
from fedray.api.progress import Activity, clock
from fedray.api.session import Session
from fedray.core import calls
from fedray.core.contract import Task
from fedray.core.errors import ConfigError, DataError
from fedray.core.ops import fcm, kmeans, kmeans_plusplus, lloyd, sq_distances
from fedray.core.registry import get_algorithm
from fedray.core.seeding import CENTRAL_STARTS_STREAM, data_rng
from fedray.layers.messages import messages_table
from fedray.layers.privacy.accountant import release_counts
from fedray.plots.style import CENTRAL, FEDERATED, new_figure, save_figure, styled

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

METHODS = ("min", "elbow")
INDICES = ("auto", "fuzzy-db", "crisp-db")


@dataclass
class KSelection:
    """Result of :func:`select_k`.

    Attributes
    ----------
    table : DataFrame
        One row per K: ``k``, ``federated``, ``central``, ``local:<client>`` per
        client, ``rounds``, ``converged``, ``seconds``.
    chosen : dict
        Chosen K per curve (``federated``, ``central``, ``local:<client>``).
    federated_centers, central_centers : dict of int -> ndarray of shape (k, d)
        Centres per K (the session's feature space).
    """

    table: pd.DataFrame
    chosen: dict[str, int | None]
    method: str
    index: str
    algorithm: str
    n_init: int = 10
    federated_centers: dict[int, np.ndarray] = field(default_factory=dict)
    central_centers: dict[int, np.ndarray] = field(default_factory=dict)
    output_dir: Path | None = None
    #: What the session's calls outside the runs sent (validation sums, local curves): the
    #: message-log rows (with ``output.messages``), the disclosures counted and the releases.
    outside: dict[str, Any] = field(default_factory=dict)

    @property
    def k(self) -> int | None:
        """The federated choice of K."""
        return self.chosen.get("federated")

    @property
    def local_columns(self) -> list[str]:
        return [c for c in self.table.columns if c.startswith("local:")]

    def markdown(self, digits: int = 4) -> str:
        """The table as Markdown, the chosen K per column in bold, a last row with the choices."""
        cols = ["federated"] + (["central"] if "central" in self.table else []) + self.local_columns
        head = "| K | " + " | ".join(cols) + " |"
        lines = [head, "|" + "---|" * (len(cols) + 1)]
        for _, row in self.table.iterrows():
            cells = []
            for c in cols:
                v = row[c]
                s = "—" if not np.isfinite(v) else f"{v:.{digits}f}"
                cells.append(f"**{s}**" if self.chosen.get(c) == int(row["k"]) else s)
            lines.append(f"| {int(row['k'])} | " + " | ".join(cells) + " |")
        lines.append("| chosen K | " + " | ".join(str(self.chosen.get(c)) for c in cols) + " |")
        if "central" in self.table or self.local_columns:
            lines.append("")
            lines.append(f"Central and local baselines: best of {self.n_init} starts "
                         "(k-means++, Lloyd, then the algorithm) per K.")
        return "\n".join(lines)

    def save(self, directory: str | Path) -> Path:
        out = Path(directory)
        (out / "plots").mkdir(parents=True, exist_ok=True)
        self.table.to_parquet(out / "k_selection.parquet", index=False)
        (out / "k_selection.json").write_text(json.dumps(
            {"algorithm": self.algorithm, "index": self.index, "method": self.method, "chosen": self.chosen,
             "k": self.k, "n_init": self.n_init,
             # what the calls outside the runs disclosed (e.g. the local-only baseline's per-client curves)
             "disclosures": dict(self.outside.get("disclosures", {})),
             # the statistics those calls released to the server, per call kind (summed, noised)
             "releases": release_counts(self.outside)}, indent=2))
        if self.outside.get("messages"):  # output.messages: what reached the server outside the runs
            messages_table(self.outside["messages"]).to_parquet(out / "messages.parquet", index=False)
        (out / "k_selection.md").write_text(f"{self.index} of `{self.algorithm}` per K ({self.method}):\n\n"
                                            + self.markdown() + "\n")
        np.savez(out / "centers.npz", **{f"federated_k{k}": c for k, c in self.federated_centers.items()},
                 **{f"central_k{k}": c for k, c in self.central_centers.items()})
        plot_k_selection(self, out / "plots" / "k_selection.png")
        names = ("k_selection.parquet", "k_selection.json", "messages.parquet", "k_selection.md", "centers.npz",
                 "plots/k_selection.png")
        record(out, [out / n for n in names if (out / n).is_file()])  # what --overwrite may delete later
        release(out)  # claimed by select_k: written now
        self.output_dir = out
        return out


# --- choosing K on a curve ------------------------------------------------------------
def choose_k(ks: Any, values: Any, method: str = "min") -> int | None:
    """K at the minimum of ``values``, or at the elbow of the curve.

    The elbow is the K farthest below the chord from the first to the last point
    of the running minimum of the (normalised) curve — the point after which a
    larger K no longer pays off. Non-finite values are skipped; an all-NaN curve
    gives None.
    """
    if method not in METHODS:
        raise ConfigError(f"select-k --method: must be one of {', '.join(METHODS)}; got {method!r}")
    ks = np.asarray(ks, dtype=np.int64)
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v)
    if not ok.any():
        return None
    ks, v = ks[ok], v[ok]
    if method == "min" or len(ks) < 3:
        return int(ks[int(np.argmin(v))])
    run = np.minimum.accumulate(v)
    span = run[0] - run[-1]
    if span <= 0:
        return int(ks[0])
    x = (ks - ks[0]) / max(ks[-1] - ks[0], 1)
    y = (run - run[-1]) / span  # 1 at the start, 0 at the end
    below = (1.0 - x) - y  # distance below the chord from (0, 1) to (1, 0)
    return int(ks[int(np.argmax(below))])


# --- baselines -----------------------------------------------------------------------
def central_fit(X: np.ndarray, k: int, fuzzy: bool, rng: np.random.Generator, *, m: float = 2.0,
                tol: float = 1e-3, n_init: int = 10) -> np.ndarray:
    """Non-federated clustering of ``X``: the best of ``n_init`` starts.

    Every start is a k-means++ seeding refined by Lloyd's k-means; for a fuzzy
    index FCM then runs from those centres to ``tol``. The start with the lowest
    objective (J_m for FCM, inertia for k-means) wins.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    k : int
    fuzzy : bool
        FCM (True) or k-means (False).
    rng : Generator
        The only source of randomness (starts are drawn from it in turn).
    m, tol : float
        FCM fuzzifier and stopping tolerance.
    n_init : int
        Number of starts (>= 1).

    Returns
    -------
    ndarray of shape (k, d)
    """
    if int(n_init) < 1:
        raise ConfigError(f"select-k --n-init: must be an int >= 1; got {n_init!r}")
    if not fuzzy:
        return kmeans(X, k, rng, n_init=int(n_init))
    best, best_obj = None, np.inf
    for _ in range(int(n_init)):
        C0 = lloyd(X, kmeans_plusplus(X, k, rng))[0]
        C, U, _ = fcm(X, C0, m=m, tol=tol, max_iter=1000)
        obj = float(np.sum((U ** m) * sq_distances(X, C)))
        if obj < best_obj:
            best, best_obj = C, obj
    return best


def central_curve(X: np.ndarray, ks: Any, fuzzy: bool, seed: int, *, m: float = 2.0, q: float = 1.0,
                  p: float = 2.0, tol: float = 1e-3, n_init: int = 10) -> tuple[list[float], dict[int, np.ndarray]]:
    """The central baseline of :func:`select_k`: :func:`central_fit` and the index on ``X`` for every K.

    K's starts come from the stream ``data_rng(seed, 7001, K)``, so a curve
    computed here equals the ``central`` column of ``select_k`` on the same union.

    Returns
    -------
    values : list of float, one per K
    centres : dict of int -> ndarray of shape (k, d)
    """
    values, centres = [], {}
    for k in ks:
        C = central_fit(X, int(k), fuzzy, data_rng(seed, CENTRAL_STARTS_STREAM, int(k)), m=m, tol=tol, n_init=n_init)
        centres[int(k)] = C
        values.append(_index(X, C, fuzzy, m, q, p))
    return values, centres


def _index(X: np.ndarray, C: np.ndarray, fuzzy: bool, m: float, q: float, p: float) -> float:
    return fuzzy_davies_bouldin(X, C, m, q, p) if fuzzy else crisp_davies_bouldin(X, C, q, p)


def local_index_curve(payload: dict[str, Any], shared: Any, client: Any) -> dict[str, list[float]]:
    """Client task: cluster the shard alone for every K in ``payload["ks"]``; returns only the index values."""
    X = client.data.X
    out = []
    for k in payload["ks"]:
        if k > X.shape[0] or np.unique(X[: 10 * k + 1000], axis=0).shape[0] < k:
            out.append(float("nan"))
            continue
        C = central_fit(X, int(k), payload["fuzzy"], client.rng, m=payload["m"], tol=payload["tol"],
                        n_init=int(payload.get("n_init", 10)))
        out.append(_index(X, C, payload["fuzzy"], payload["m"], payload["q"], payload["p"]))
    return {"ks": list(payload["ks"]), "index": out}


# --- the procedure ------------------------------------------------------------------------
def select_k(config: Any = None, *, k_min: int = 2, k_max: int = 8, method: str = "min", index: str = "auto",
             central: bool = True, local: bool = True, local_k_range: tuple[int, int] | None = None,
             hide_n: bool = False, n_init: int = 10, output: str | Path | None = None,
             overrides: list[str] | dict | None = None, session: Any = None, **kwargs: Any) -> KSelection:
    """Run the configured algorithm for every K in [k_min, k_max] on one session and choose K.

    Parameters
    ----------
    config : ExperimentConfig, mapping or YAML path
        The experiment; ``algorithm.params.n_clusters`` is set per K.
    k_min, k_max : int
        The range of K (2 <= k_min <= k_max).
    method : {"min", "elbow"}
    index : {"auto", "fuzzy-db", "crisp-db"}
        "auto": FedFuzzDB for fuzzy algorithms, the crisp index otherwise.
    central, local : bool
        Compute the central and local-only baselines (simulation only).
    local_k_range : (int, int), optional
        K range of the local-only baseline (default: the data set's, else [k_min, k_max]).
    hide_n : bool
        Hide each client's sample count from the server (only the total is revealed).
    n_init : int
        Starts of the central and local baselines per K (k-means++, Lloyd, then FCM
        or nothing more for k-means); the best by the algorithm's objective is kept.
    output : path, optional
        Folder for the table, the choices (with the disclosures of the calls outside the runs),
        ``plots/k_selection.png`` and, with ``output.messages``, those calls' ``messages.parquet``.
    session : Session, optional
        Reuse an open session (it is not closed); otherwise one is built and closed.

    Returns
    -------
    KSelection
    """
    if method not in METHODS:
        raise ConfigError(f"select-k --method: must be one of {', '.join(METHODS)}; got {method!r}")
    if index not in INDICES:
        raise ConfigError(f"select-k --index: must be one of {', '.join(INDICES)}; got {index!r}")
    if int(k_min) < 2:
        raise ConfigError(f"select-k --k-min: the Davies–Bouldin index needs K >= 2; got k_min={k_min}")
    if int(k_max) < int(k_min):
        raise ConfigError(f"select-k --k-max: the range of K is empty (k_min={k_min}, k_max={k_max})")
    if isinstance(n_init, bool) or not isinstance(n_init, (int, np.integer)) or int(n_init) < 1:
        raise ConfigError(f"select-k --n-init: must be an int >= 1; got {n_init!r}")
    cfg = session.config if session is not None else make_config(config, overrides=overrides, **kwargs)
    cls = get_algorithm(cfg.algorithm.name)
    if "n_clusters" not in cls.Params.model_fields:
        raise ConfigError(f"select-k: algorithm {cfg.algorithm.name!r} has no n_clusters parameter")
    fuzzy = index == "fuzzy-db" or (index == "auto" and cls.fuzzy)
    index_name = "fuzzy-db" if fuzzy else "crisp-db"
    if output:  # claimed before any work, as a run claims its folder (output.overwrite replaces fedray's files)
        prepare(output, overwrite=cfg.output.overwrite)
    own = session is None
    sess = Session(cfg) if own else session
    try:
        return _select(sess, cfg, cls, int(k_min), int(k_max), method, fuzzy, index_name, central, local,
                       local_k_range, hide_n, int(n_init), output)
    finally:
        if own:
            sess.close()


def _local_curves(sess: Any, local_k_range: tuple[int, int] | None, k_min: int, k_max: int, ks: list[int],
                  payload: dict[str, Any]) -> dict[str, list[float]]:
    """The local-only baseline: each client's own index curve over ``ks`` (an ad-hoc call through the
    session's layers; the per-client curves reach the server and are counted as a disclosure)."""
    info = sess.info
    lo, hi = _local_range(info, local_k_range, k_min, k_max)
    payload = {"ks": [k for k in ks if lo <= k <= hi], **payload}
    res = sess.call(calls.adhoc("select_k local curves"),
                    {cid: Task(local_index_curve, payload, None) for cid in range(info.n_clients)})
    sess.disclosures["local_index_curves"] = sess.disclosures.get("local_index_curves", 0) + len(res.replies)
    if len(res.replies) < info.n_clients:
        raise DataError(f"select-k: the local-only baseline failed on {info.n_clients - len(res.replies)} clients")
    names = sess.descriptions.all_names()
    out = {}
    for r in res.replies:
        curve = dict(zip(r.update["ks"], r.update["index"]))
        out[f"local:{names[r.client_id]}"] = [curve.get(k, np.nan) for k in ks]
    return out


def _runs(sess: Any, cfg: Any, base: dict[str, Any], ks: list[int], fuzzy: bool, index_name: str, central: bool,
          X_union: np.ndarray | None, hide_n: bool, opts: tuple[float, float, float, float, int], act: Activity
          ) -> tuple[list[dict[str, Any]], dict[int, np.ndarray], dict[int, np.ndarray]]:
    """One run of the algorithm and the federated index for every K (and the central curve's point)."""
    m, q, p, tol, n_init = opts
    rows: list[dict[str, Any]] = []
    fed_centers: dict[int, np.ndarray] = {}
    cen_centers: dict[int, np.ndarray] = {}
    start = time.perf_counter()
    for i, k in enumerate(ks):
        t0 = time.perf_counter()
        eta = f", ETA {clock((t0 - start) / i * (len(ks) - i))}" if i else ""
        act.stage(f"K={k} ({i + 1} of {len(ks)}){eta}", f"K={k}")
        res = sess.run(cfg.algorithm.name, {**base, "n_clusters": k}, output=False, progress=False,
                       central_baseline=False)
        C = np.asarray(res.model["centers"])
        fed_centers[k] = C
        value = (federated_fuzzy_db(sess, C, m, q, p, hide_n=hide_n) if fuzzy
                 else federated_crisp_db(sess, C, q, p, hide_n=hide_n))
        row: dict[str, Any] = {"k": k, "federated": value, "rounds": int(res.summary["rounds"]),
                               "converged": bool(res.summary["converged"]), "seconds": time.perf_counter() - t0}
        if central:
            vals, cc = central_curve(X_union, [k], fuzzy, cfg.seed, m=m, q=q, p=p, tol=tol, n_init=n_init)
            cen_centers.update(cc)
            row["central"] = vals[0]
        rows.append(row)
        log.info("select-k: K=%d federated %s=%.4f%s (%d rounds)", k, index_name, value,
                 f", central {row['central']:.4f}" if central else "", row["rounds"])
    return rows, fed_centers, cen_centers


def _select(sess: Any, cfg: Any, cls: Any, k_min: int, k_max: int, method: str, fuzzy: bool, index_name: str,
            central: bool, local: bool, local_k_range: tuple[int, int] | None, hide_n: bool, n_init: int,
            output: str | Path | None) -> KSelection:
    info = sess.info
    if k_max > info.total_samples:
        raise DataError(f"select-k --k-max: k_max={k_max} is more than the {info.total_samples} samples of "
                        "the federation")
    base = dict(cfg.algorithm.params)
    defaults = cls.Params.model_fields
    m = float(base.get("m", defaults["m"].default if "m" in defaults else 2.0))
    q = float(base.get("q", defaults["q"].default if "q" in defaults else 1.0))
    p = float(base.get("p", defaults["p"].default if "p" in defaults else 2.0))
    tol = float(base.get("local_tol", 1e-3))
    ks = list(range(k_min, k_max + 1))
    X_union = None
    act = Activity("select-k", None)  # which K runs, with the elapsed seconds and an ETA
    try:
        if central:
            act.stage("gathering the union for the central baseline")
            X_union = np.vstack([part[1] for part in sess.executor.gather_data(labels=False)])
        rows, fed_centers, cen_centers = _runs(sess, cfg, base, ks, fuzzy, index_name, central, X_union, hide_n,
                                               (m, q, p, tol, n_init), act)
        table = pd.DataFrame(rows)
        if local:
            act.stage(f"local-only baselines on {info.n_clients} clients")
            for name, values in _local_curves(sess, local_k_range, k_min, k_max, ks, payload={
                    "fuzzy": fuzzy, "m": m, "q": q, "p": p, "tol": tol, "n_init": n_init}).items():
                table[name] = values
    finally:
        act.close(f"{len(ks)} values of K in {act.elapsed:.1f} s")
    chosen: dict[str, int | None] = {"federated": choose_k(table["k"], table["federated"], method)}
    if central:
        chosen["central"] = choose_k(table["k"], table["central"], method)
    for c in [c for c in table.columns if c.startswith("local:")]:
        chosen[c] = choose_k(table["k"], table[c], method)
    sel = KSelection(table, chosen, method, index_name, cfg.algorithm.name, n_init, fed_centers, cen_centers,
                     outside=sess.outside_records())
    if output:
        sel.save(output)
    return sel


def _local_range(info: Any, local_k_range: tuple[int, int] | None, k_min: int, k_max: int) -> tuple[int, int]:
    rng = local_k_range if local_k_range is not None else info.extras.get("local_k_range")
    if rng is None:
        return k_min, k_max
    lo, hi = int(rng[0]), int(rng[1])
    if lo < 2 or hi < lo:
        raise ConfigError(f"select-k local_k_range: must be [lo, hi] with 2 <= lo <= hi; got {list(rng)}")
    return lo, hi


# --- plot ---------------------------------------------------------------------------------
@styled
def k_selection_figure(sel: KSelection, title: str | None = None) -> Figure:
    """Central, federated and local index curves over K, the chosen K marked.

    Parameters
    ----------
    sel : KSelection
        Its ``table`` (one row a K) with the ``federated`` column, and ``central``
        and ``local:*`` columns where computed.
    title : str or None
        Default: the algorithm and the federated choice of K.

    Returns
    -------
    Figure
    """
    from matplotlib import colormaps

    t = sel.table
    fig = new_figure((6.4, 4.2))
    ax = fig.subplots()
    ax.plot(t["k"], t["federated"], "o-", color=FEDERATED, lw=2.2, label="federated")
    if "central" in t:
        ax.plot(t["k"], t["central"], "s--", color=CENTRAL, lw=1.8, label="central (union)")
    greys = colormaps["Greys"]
    for i, c in enumerate(sel.local_columns):
        ax.plot(t["k"], t[c], ":", marker=".", color=greys(0.45 + 0.4 * i / max(1, len(sel.local_columns))),
                label=c.replace("local:", "local "))
    for c, colour in (("federated", FEDERATED), ("central", CENTRAL)):
        k = sel.chosen.get(c)
        if k is not None:
            ax.axvline(k, color=colour, alpha=0.25, lw=6)
    ax.set_xlabel("number of clusters K")
    ax.set_ylabel(f"{sel.index} (lower is better)")
    ax.set_xticks(list(t["k"]))
    ax.legend(loc="best")
    ax.set_title(title or f"{sel.algorithm}: federated K = {sel.k}")
    return fig


def plot_k_selection(sel: KSelection, path: str | Path, title: str | None = None) -> Path:
    """Save :func:`k_selection_figure` as PNG; returns the path."""
    return save_figure(k_selection_figure(sel, title=title), path)


# --- command line -------------------------------------------------------------------------
def cmd_select_k(args: argparse.Namespace) -> int:
    out = args.out or Path("fedray-output") / f"select-k-{time.strftime('%Y%m%d-%H%M%S')}"
    lrange = (args.k_min if args.local_k_min is None else args.local_k_min, args.local_k_max) \
        if args.local_k_max is not None else None
    sel = select_k(args.config, k_min=args.k_min, k_max=args.k_max, method=args.method, index=args.index,
                   central=not args.no_central, local=not args.no_local, local_k_range=lrange, hide_n=args.hide_n,
                   n_init=args.n_init, output=out, overrides=args.set or [])
    print(sel.markdown())
    print(f"chosen K (federated): {sel.k}")
    print(f"outputs: {sel.output_dir}")
    return 0


def add_cli(subparsers: Any) -> None:
    """Add ``fedray select-k``."""
    s = subparsers.add_parser("select-k", help="choose the number of clusters K with a federated validation index")
    s.add_argument("config", nargs="?", help="YAML config (the algorithm must have n_clusters)")
    s.add_argument("--k-min", type=int, default=2)
    s.add_argument("--k-max", type=int, default=8)
    s.add_argument("--method", choices=METHODS, default="min", help="minimum of the index or the elbow of its curve")
    s.add_argument("--index", choices=INDICES, default="auto",
                   help="auto: FedFuzzDB for fuzzy algorithms, else crisp DB")
    s.add_argument("--local-k-min", type=int, default=None, help="lower K of the local-only baseline")
    s.add_argument("--local-k-max", type=int, default=None, help="upper K of the local-only baseline")
    s.add_argument("--no-central", action="store_true", help="skip the central baseline on the union")
    s.add_argument("--no-local", action="store_true", help="skip the local-only baselines")
    s.add_argument("--hide-n", action="store_true", help="reveal only the total sample count to the server")
    s.add_argument("--n-init", type=int, default=10, help="starts of the central and local baselines per K (best kept)")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override, e.g. federation.n_clients=5")
    s.add_argument("--out", help="output folder (default: fedray-output/select-k-TIMESTAMP)")
    s.set_defaults(func=cmd_select_k)
