"""The peers' own published workloads, fedray against Flower, side by side in one run.

Each workload is one a peer simulator published a speed figure for, run as that peer describes
it, with the peer's figure and hardware quoted beside the row:

* ``flute``: FLUTE's MNIST logistic regression (Dimitriadis et al. 2022): 1,000 clients with
  Dirichlet(0.5) labels over MNIST's 60,000 training rows, 10 a round, 100 rounds, 1 local epoch,
  batch 10, SGD at 0.03. FLUTE published 3:20 against 30:14 for Flower 1.0.
* ``blazefl``: BlazeFL's CIFAR-10 configuration (their benchmark repository: the PyTorch tutorial
  CNN, 100 clients with IID shards of the 50,000 training images, all of them every round, 5 rounds
  of 5 local epochs, batch 50, SGD at 0.1). BlazeFL published "up to 3.1x" over Flower.
* ``pfl``: pfl-research's CIFAR-10 benchmark (their ``simple_cnn``, 1,000 clients of 50 IID
  images, 50 a round, 1,500 rounds, 1 local epoch, batch 10, SGD at 0.1; the server's learning rate
  1 is FedAvg), published "7-72x faster" than other simulators on one A100 with 10 CPUs. A GPU
  workload: it runs with ``--device cuda``, ``--rounds`` caps it and the table gives the rate per round.

Both systems do the same work: the same partition (fedray's, built from the same configuration on
both sides), the same model and initial weights (``peer_models.py``, through fedray's model
factories), the same hyperparameters, plain SGD, FedAvg weighted by the clients' rows. Flower 1.42
runs it as a ``ServerApp`` that samples the round's SuperNodes and averages their replies and a
``ClientApp`` that trains its shard (built in its worker, once), one SuperNode per client. Each
system runs in a fresh process with its own Ray instance (``harness.child``). After training, each
side scores its final model on the same held-out rows (the data set's test part), so that the
accuracies compare the same work.

Columns: ``round_s`` the mean round after the first; ``rounds_s`` all rounds; ``startup_s`` from the
start to the first round (Ray, clients or SuperNodes); ``wall_s`` all of it, held-out scoring left
out; ``updates_per_s`` client updates (trained replies) per second of rounds.

Usage (Flower in an environment of its own, see benchmarks/README.md)::

    python benchmarks/peers/run.py --flower-python /tmp/flwr-env/bin/python           # flute, blazefl
    python benchmarks/peers/run.py --workload flute --quick --flower-python ...       # a check
    python benchmarks/peers/run.py --workload pfl --device cuda --num-cpus 10 --rounds 200
    python benchmarks/peers/run.py --workload all --quick --systems fedray            # fedray only
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from harness import child, flower_backend, flower_missing, load, markdown, steady, version, wait_for_nodes  # noqa: E402

REPO = HERE.parents[1]


@dataclasses.dataclass(frozen=True)
class Workload:
    """One peer's published workload (FedAvg of a torch model on an image set)."""

    title: str
    dataset: str
    partition: dict[str, Any]
    clients: int
    per_round: int
    rounds: int
    epochs: int
    batch_size: int
    lr: float
    model: str  # a function of peer_models.py
    published: str
    hardware: str
    source: str
    quick: dict[str, int]  # what --quick changes
    gpu: bool = False  # the peer's figure is a GPU one: run with --device cuda


WORKLOADS: dict[str, Workload] = {
    "flute": Workload(
        "FLUTE: MNIST logistic regression", "mnist", {"name": "dirichlet", "alpha": 0.5},
        clients=1000, per_round=10, rounds=100, epochs=1, batch_size=10, lr=0.03, model="logreg",
        published="FLUTE 3:20 against Flower 1.0 30:14 (9.1x), 100 rounds", hardware="CPU",
        source="Dimitriadis et al. 2022, FLUTE (arXiv 2203.13789)",
        quick={"clients": 20, "per_round": 10, "rounds": 2}),
    "blazefl": Workload(
        "BlazeFL: CIFAR-10, tutorial CNN", "cifar10", {"name": "iid"},
        clients=100, per_round=100, rounds=5, epochs=5, batch_size=50, lr=0.1, model="blazefl_cnn",
        published="BlazeFL up to 3.1x over Flower", hardware="a single node (not stated in what we read)",
        source="Azuma & Nishio 2026, BlazeFL (arXiv 2604.03606); settings from the blazefl/benchmarks repository",
        quick={"clients": 100, "per_round": 20, "rounds": 2}),
    "pfl": Workload(
        "pfl-research: CIFAR-10, simple CNN", "cifar10", {"name": "iid"},
        clients=1000, per_round=50, rounds=1500, epochs=1, batch_size=10, lr=0.1, model="pfl_cnn",
        published="pfl-research 7-72x faster than other simulators", hardware="one A100 GPU, 10 CPUs",
        source="Granqvist et al. 2024, pfl-research (arXiv 2404.06430); benchmarks/image_classification",
        quick={"clients": 1000, "per_round": 10, "rounds": 3, "epochs": 5}, gpu=True),
}
CPU_WORKLOADS = [k for k, w in WORKLOADS.items() if not w.gpu]


def default_data_dir() -> str:
    """``$FEDRAY_DATA_DIR``, else ``../shared/datasets`` beside the repository."""
    return os.environ.get("FEDRAY_DATA_DIR") or str(REPO.parent / "shared" / "datasets")


def make_spec(name: str, *, quick: bool = False, rounds: int | None = None, seed: int = 0,
              data_dir: str | None = None, num_cpus: int = 2, client_cpus: float = 1.0, device: str = "cpu",
              eval_rows: int | None = None) -> dict[str, Any]:
    """The measured configuration of workload ``name`` as a JSON-able mapping (what a child gets)."""
    w = WORKLOADS[name]
    spec = {k: v for k, v in dataclasses.asdict(w).items() if k != "quick"}
    if quick:
        spec.update(w.quick)
    if rounds is not None:
        spec["rounds"] = min(int(rounds), spec["rounds"])
    spec.update(name=name, seed=int(seed), data_dir=str(data_dir or default_data_dir()), num_cpus=int(num_cpus),
                client_cpus=float(client_cpus), device=device,
                eval_rows=int(eval_rows) if eval_rows else (2000 if quick else None))
    return spec


def fedray_config(spec: dict[str, Any]) -> dict[str, Any]:
    """The workload as a fedray configuration (FedAvg, every row of a shard trains, no per-round
    evaluation: round 0 is the only evaluation round, on clients without test rows)."""
    runtime: dict[str, Any] = {"backend": "ray", "num_cpus": spec["num_cpus"], "progress": False}
    if spec["device"] != "cpu":  # one GPU shared by the actors (about one actor per CPU)
        runtime["client_resources"] = {"num_gpus": round(1.0 / spec["num_cpus"], 4)}
    return {
        "seed": spec["seed"],
        "algorithm": {"name": "fedavg", "params": {
            "model": f"peer_models:{spec['model']}", "optimizer": "sgd", "lr": spec["lr"], "epochs": spec["epochs"],
            "batch_size": spec["batch_size"], "test_fraction": 0.0, "eval_every": spec["rounds"] + 1,
            "device": spec["device"]}},
        "data": {"dataset": spec["dataset"], "data_dir": spec["data_dir"], "options": {"part": "train"},
                 "partition": dict(spec["partition"])},
        "federation": {"n_clients": spec["clients"], "fraction": spec["per_round"] / spec["clients"],
                       "rounds": spec["rounds"]},
        "runtime": runtime,
        "output": {"directory": None, "plots": False},
    }


def heldout(spec: dict[str, Any], weights: Any) -> tuple[float, int]:
    """Accuracy of the model with ``weights`` (fedray's flat layout) on the data set's test part (its
    first ``eval_rows`` rows), and the rows scored."""
    import numpy as np

    from fedray.data.datasets import load_dataset
    from fedray.nn.models import build_model
    from fedray.nn.train import evaluate, set_flat

    ds = load_dataset(spec["dataset"], spec["data_dir"], seed=spec["seed"], part="test")
    n = len(ds.y) if not spec.get("eval_rows") else min(len(ds.y), int(spec["eval_rows"]))
    model = build_model(f"peer_models:{spec['model']}", tuple(ds.sample_shape), int(ds.n_classes), spec["seed"])
    set_flat(model, np.asarray(weights, dtype=np.float32))
    _, acc = evaluate(model, ds.X[:n].astype(np.float32).reshape(n, *ds.sample_shape), ds.y[:n])
    return float(acc), int(n)


# --- fedray -------------------------------------------------------------------------------------
def run_fedray(spec: dict[str, Any]) -> dict[str, Any]:
    """The workload on fedray's ray runtime in this process."""
    import numpy as np

    import fedray
    from fedray.api.session import Session

    t0 = time.perf_counter()
    cfg = fedray.make_config(fedray_config(spec))
    with Session(cfg) as session:
        startup = time.perf_counter() - t0
        result = session.run(output=False, progress=False, central_baseline=False)
    wall = time.perf_counter() - t0
    h = result.history
    weights = np.asarray(result.model["weights"])[0]
    acc, rows = heldout(spec, weights)
    return {"system": f"fedray {version('fedray')}", "round_times": h["wall_s"].tolist(), "startup_s": startup,
            "wall_s": wall, "updates": _trained(h), "accuracy": acc,
            "eval_rows": rows}


def _trained(h: Any) -> int:
    """Client updates the rounds trained: ``clients_trained`` where a round also had clients that only
    evaluated (fedray's evaluation rounds), else every reply of the round."""
    answered = h["clients_answered"]
    if "clients_trained" in h:
        answered = h["clients_trained"].fillna(answered)
    return int(answered.sum())


# --- Flower -------------------------------------------------------------------------------------
def run_flower(spec: dict[str, Any]) -> dict[str, Any]:
    """The workload on Flower's simulation engine in this process (a ServerApp and a ClientApp)."""
    import numpy as np
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    import fedray
    from fedray.data.federation import build_federation, materialize
    from fedray.nn.models import build_model
    from fedray.nn.train import get_flat

    n, per_round, rounds, seed = spec["clients"], spec["per_round"], spec["rounds"], spec["seed"]
    cfg = fedray.make_config(fedray_config(spec))
    worker: dict[Any, Any] = {}  # travels (empty) with the client app; filled once in each worker

    def shard(cid: int) -> tuple[Any, Any, Any]:
        if "federation" not in worker:
            if str(HERE) not in sys.path:  # the worker imports peer_models to build the model
                sys.path.insert(0, str(HERE))
            fed = build_federation(cfg.data, n, seed)  # fedray's partition, from the same configuration
            worker["federation"] = fed
            worker["model"] = build_model(f"peer_models:{spec['model']}", fed.sample_shape, fed.n_classes, seed)
        if cid not in worker:
            fed = worker["federation"]
            X, y, _ = materialize(fed.specs[cid])
            worker[cid] = (X.astype(np.float32).reshape(len(X), *fed.sample_shape), np.asarray(y, np.int64))
        return (*worker[cid], worker["model"])

    client_app = ClientApp()

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        cid = int(context.node_config["partition-id"])
        X, y, model = shard(cid)
        w = local_sgd(model, X, y, msg.content["arrays"]["w"].numpy(), spec, (seed, cid, int(
            msg.content["config"]["round"])))
        return Message(RecordDict({"arrays": ArrayRecord({"w": Array(w)}),
                                   "metrics": MetricRecord({"num-examples": int(len(y))})}), reply_to=msg)

    times: list[float] = []
    final: dict[str, Any] = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        nodes = sorted(wait_for_nodes(grid, n))
        final["startup_s"] = time.perf_counter() - t0
        fed = build_federation(cfg.data, n, seed)
        w = get_flat(build_model(f"peer_models:{spec['model']}", fed.sample_shape, fed.n_classes, seed))
        updates = 0
        for rnd in range(rounds):
            t = time.perf_counter()
            rng = np.random.default_rng([seed, rnd])
            chosen = rng.choice(len(nodes), size=per_round, replace=False)
            content = RecordDict({"arrays": ArrayRecord({"w": Array(w)}), "config": ConfigRecord({"round": rnd})})
            replies = list(grid.send_and_receive(
                [Message(content, dst_node_id=nodes[i], message_type="train") for i in chosen]))
            ok = [r for r in replies if r.has_content()]
            if not ok:
                errors = [r.error.reason for r in replies if r.has_error()]
                raise RuntimeError(f"round {rnd}: no client answered ({len(replies)} replies; first error: "
                                   f"{errors[0] if errors else 'none'})")
            counts = np.array([float(r.content["metrics"]["num-examples"]) for r in ok])
            if counts.sum() > 0:
                w = sum(c * r.content["arrays"]["w"].numpy() for c, r in zip(counts, ok)) / counts.sum()
                w = w.astype(np.float32)
            updates += len(ok)
            times.append(time.perf_counter() - t)
        final.update(weights=w, updates=updates)

    gpus = round(float(spec["client_cpus"]) / spec["num_cpus"], 4) if spec["device"] != "cpu" else 0.0
    t0 = time.perf_counter()
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=n,
                   backend_config=flower_backend(spec["num_cpus"], spec["client_cpus"], gpus), verbose_logging=False)
    wall = time.perf_counter() - t0
    if "weights" not in final:
        raise RuntimeError("Flower's ServerApp ended without a model (see its log above)")
    acc, rows = heldout(spec, final.pop("weights"))
    return {"system": f"flower {version('flwr')}", "round_times": times, "wall_s": wall, "accuracy": acc,
            "eval_rows": rows, **final}


def local_sgd(model: Any, X: Any, y: Any, w0: Any, spec: dict[str, Any], key: tuple[int, ...]) -> Any:
    """E epochs of plain SGD over shuffled mini-batches from weights ``w0``; the trained flat weights."""
    import numpy as np
    import torch
    from torch.nn import functional as F

    from fedray.nn.train import get_flat, set_flat

    device = torch.device(spec["device"])
    torch.set_num_threads(max(1, int(spec["client_cpus"])))
    model = model.to(device)
    set_flat(model, w0)
    model.train()
    if len(y):
        Xt, yt = torch.from_numpy(X).to(device), torch.from_numpy(y).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=spec["lr"])
        rng = np.random.default_rng(list(key))
        for _ in range(spec["epochs"]):
            order = torch.from_numpy(rng.permutation(len(y))).to(device)
            for s in range(0, len(y), spec["batch_size"]):
                idx = order[s:s + spec["batch_size"]]
                opt.zero_grad()
                F.cross_entropy(model(Xt[idx]), yt[idx]).backward()
                opt.step()
    return get_flat(model)


# --- driver -------------------------------------------------------------------------------------
DETAIL = [("workload", ""), ("system", ""), ("clients", ""), ("per_round", ""), ("rounds", ""), ("round_s", ".4f"),
          ("first_round_s", ".3f"), ("rounds_s", ".1f"), ("startup_s", ".1f"), ("wall_s", ".1f"),
          ("updates_per_s", ".1f"), ("accuracy", ".4f"), ("eval_rows", ""), ("error", "")]
SUMMARY = [("workload", ""), ("fedray round_s", ".4f"), ("flower round_s", ".4f"), ("x per round", ".1f"),
           ("fedray wall_s", ".1f"), ("flower wall_s", ".1f"), ("x end to end", ".1f"), ("fedray acc", ".4f"),
           ("flower acc", ".4f"), ("published", ""), ("their hardware", "")]


def _row(name: str, spec: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    t = r.get("round_times") or []
    rounds_s = sum(t) if t else float("nan")
    return {"workload": name, "clients": spec["clients"], "per_round": spec["per_round"], "rounds": len(t) or "",
            "round_s": steady(t), "first_round_s": t[0] if t else None, "rounds_s": rounds_s,
            "updates_per_s": r["updates"] / rounds_s if t and r.get("updates") else None,
            **{k: r.get(k) for k in ("system", "startup_s", "wall_s", "accuracy", "eval_rows", "error")}}


def _summary(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    w = WORKLOADS[name]
    by = {r["system"].split()[0]: r for r in rows if not r.get("error")}
    out: dict[str, Any] = {"workload": name, "published": w.published, "their hardware": w.hardware}
    for s in ("fedray", "flower"):
        if s in by:
            out.update({f"{s} round_s": by[s]["round_s"], f"{s} wall_s": by[s]["wall_s"],
                        f"{s} acc": by[s]["accuracy"]})
    if len(by) == 2:
        out["x per round"] = by["flower"]["round_s"] / by["fedray"]["round_s"]
        out["x end to end"] = by["flower"]["wall_s"] / by["fedray"]["wall_s"]
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="cpu", choices=[*WORKLOADS, "cpu", "all"],
                   help="a workload, 'cpu' (those whose published figure is a CPU one: default) or 'all'")
    p.add_argument("--quick", action="store_true", help="a small form of each workload, to check the script")
    p.add_argument("--systems", default="fedray,flower", help="fedray, flower or both (comma-separated)")
    p.add_argument("--flower-python", default=None,
                   help="Python interpreter of an environment with Flower 1.42 (default: this one)")
    p.add_argument("--data-dir", default=None, help="folder of mnist/ and cifar10/ (default: $FEDRAY_DATA_DIR, "
                   "else ../shared/datasets beside the repository)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where clients train")
    p.add_argument("--rounds", type=int, default=None, help="at most this many rounds (e.g. pfl's 1,500 on a GPU)")
    p.add_argument("--num-cpus", type=int, default=2, help="CPUs of each system's Ray instance")
    p.add_argument("--client-cpus", type=float, default=1.0, help="CPUs per Flower client worker")
    p.add_argument("--eval-rows", type=int, default=None, help="held-out rows scored (default: all; --quick 2000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600, help="seconds allowed per system and workload")
    p.add_argument("--out", help="folder for peers.md and peers.json")
    p.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        return args
    for flag, v in (("--rounds", args.rounds), ("--num-cpus", args.num_cpus), ("--eval-rows", args.eval_rows)):
        if v is not None and v < 1:
            p.error(f"{flag}: must be >= 1; got {v}")
    if not args.client_cpus > 0:
        p.error(f"--client-cpus: must be > 0; got {args.client_cpus}")
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not args.systems or set(args.systems) - {"fedray", "flower"}:
        p.error(f"--systems: fedray, flower or both; got {','.join(args.systems)!r}")
    names = CPU_WORKLOADS if args.workload == "cpu" else list(WORKLOADS) if args.workload == "all" else [args.workload]
    if args.device == "cpu":
        gpu_only = [n for n in names if WORKLOADS[n].gpu and not args.quick]
        if gpu_only and args.workload != "all":
            p.error(f"--workload {args.workload}: a GPU workload; run it with --device cuda (or --quick to check it)")
        names = [n for n in names if n not in gpu_only]
        args.skipped = gpu_only
    args.names = names
    data = Path(args.data_dir or default_data_dir())
    if not data.is_dir():
        p.error(f"--data-dir: {str(data)!r} is not a folder (set --data-dir or $FEDRAY_DATA_DIR)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        which, spec = args.one[0], json.loads(args.one[1])
        print(json.dumps(run_flower(spec) if which == "flower" else run_fedray(spec)), flush=True)
        return 0
    if "flower" in args.systems:
        missing = flower_missing(args.flower_python)
        if missing:
            print(f"peers: {missing}; give an environment with Flower 1.42 with --flower-python (benchmarks/README.md)",
                  file=sys.stderr)
            return 2
    before = load()
    print(f"# peers: {', '.join(args.names)}{' (quick)' if args.quick else ''}; {before}", flush=True)
    for name in getattr(args, "skipped", []):
        print(f"# {name}: left out, a GPU workload (run it with --device cuda)", flush=True)
    rows, summary = [], []
    for name in args.names:
        spec = make_spec(name, quick=args.quick, rounds=args.rounds, seed=args.seed, data_dir=args.data_dir,
                         num_cpus=args.num_cpus, client_cpus=args.client_cpus, device=args.device,
                         eval_rows=args.eval_rows)
        mine = []
        for system in args.systems:
            r = child(__file__, system, spec, args.timeout, python=args.flower_python if system == "flower" else None)
            mine.append(_row(name, spec, r))
            print(markdown(mine[-1:], DETAIL).splitlines()[-1], f"# {load()}", flush=True)
        rows += mine
        summary.append(_summary(name, mine))
    after = load()
    text = (markdown(summary, SUMMARY) + "\n" + markdown(rows, DETAIL)
            + "\n" + "\n".join(f"- {n}: {WORKLOADS[n].title}; {WORKLOADS[n].source}" for n in args.names)
            + f"\n\nload before: {before}\nload after:  {after}\n")
    print("\n" + text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        cmd = "python benchmarks/peers/run.py " + " ".join(sys.argv[1:] if argv is None else argv)
        (out / "peers.md").write_text(f"Command: `{cmd}`\n\n{text}")
        (out / "peers.json").write_text(json.dumps({"rows": rows, "summary": summary, "load_before": before,
                                                    "load_after": after}, indent=1, default=str))
    return 1 if any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
