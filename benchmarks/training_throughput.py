"""Local training throughput: batched clients against client by client, in samples per second.

Two measurements, each for ``cnn8`` (8x8 digits) and ``cnn28`` (28x28 MNIST-sized
images), batched (``runtime.batched: true``, the default) and per-client
(``runtime.batched: false``, the loop):

* ``kernel`` — the local training of one round of one host alone
  (:func:`fedray.nn.batched.fit_many` against :func:`fedray.nn.train.fit` client
  by client): ``--clients`` clients with ``--samples`` random rows each (sizes
  spread by +-25 %), E epochs of mini-batches B. FedAvg and FLACC train their
  clients the same way (the base's ``client_train``), so one row stands for both.
  ``samples_per_s`` = training rows visited (E x sum n_i) / seconds.
* ``run`` — whole runs of ``fedavg`` and ``flacc`` (evaluation, aggregation and
  the runtime included) on rotated digits: ``sklearn:digits`` for cnn8 (embedded)
  and MNIST for cnn28 (only with ``--data-dir`` holding ``mnist/``).
  ``samples_per_s`` = E x (training rows of the clients trained) / run seconds.
  On the CPU the runtime trains cnn28 client by client even when batched
  (``fedray.nn.batched.clients_per_chunk``), so its two run rows take the same
  path there; the kernel rows show what stacking it would give.

``--device cpu|cuda|auto`` picks where the clients train (``algorithm.params.device``
for runs; runs on ``cuda`` give each client actor ``1 / actors`` of the GPU,
``runtime.client_resources.num_gpus``). The script prints a table and the machine's
``uptime`` before and after; timings taken with a load above the number of cores say
little. Usage::

    python benchmarks/training_throughput.py                          # kernels and cnn8 runs, CPU
    python benchmarks/training_throughput.py --device cuda --data-dir /data   # the same on a GPU, + cnn28 runs
    python benchmarks/training_throughput.py --only kernel --models cnn28 --clients 10 --samples 1400
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {"cnn8": (1, 8, 8), "cnn28": (1, 28, 28)}
DATASETS = {"cnn8": "sklearn:digits", "cnn28": "mnist"}
_WARM: set[tuple[str, str]] = set()


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load average: {:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())


def kernel(model_name: str, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """Seconds and samples per second of one host's local training (``mode``: batched or per-client)."""
    import numpy as np
    import torch

    from fedray.nn.batched import fit_many
    from fedray.nn.models import build_model
    from fedray.nn.train import _cross_entropy, fit, get_flat, resolve_device, set_flat, torch_threads

    dev = resolve_device(args.device)
    shape = SHAPES[model_name]
    model = build_model(model_name, shape, 10, 0).to(dev)
    rs = np.random.default_rng(0)
    sizes = rs.integers(int(args.samples * 0.75), int(args.samples * 1.25) + 1, size=args.clients)
    data = [(rs.normal(size=(int(n), *shape)).astype(np.float32), rs.integers(0, 10, int(n))) for n in sizes]
    starts = np.repeat(get_flat(model)[None], args.clients, axis=0)
    kw = dict(epochs=args.epochs, batch_size=args.batch_size, lr=0.1)

    def once() -> None:
        rngs = [np.random.default_rng(i) for i in range(args.clients)]
        if mode == "batched":
            fit_many(model, starts, data, rngs, **kw)
        else:
            for i, (X, y) in enumerate(data):
                set_flat(model, starts[i])
                fit(model, (X, y), _cross_entropy, rng=rngs[i], **kw)
        if dev.type == "cuda":
            torch.cuda.synchronize()

    with torch_threads(args.threads):
        once()  # warm-up: kernels, allocator
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            once()
        secs = (time.perf_counter() - t0) / args.repeat
    samples = args.epochs * int(sizes.sum())
    return {"what": "kernel", "model": model_name, "algorithm": "fedavg/flacc", "mode": mode, "device": str(dev),
            "clients": args.clients, "seconds": secs, "samples_per_s": samples / secs}


def run(model_name: str, algorithm: str, mode: str, args: argparse.Namespace) -> dict[str, Any] | None:
    """One whole run on rotated images; None when its data set is not available."""
    import numpy as np

    import fedray

    dataset = DATASETS[model_name]
    if dataset == "mnist" and not (args.data_dir and (Path(args.data_dir) / "mnist").is_dir()):
        return None
    params: dict[str, Any] = {"model": model_name, "epochs": args.epochs, "batch_size": args.batch_size,
                              "eval_every": 5, "device": args.device}
    if algorithm == "flacc":
        params["n_merge"] = 1
    if mode == "batched":
        params["stack_clients"] = "always"  # stack on the CPU too (the default stacks on a GPU only)
    runtime: dict[str, Any] = {"backend": args.backend, "batched": mode == "batched", "progress": False}
    if args.backend == "ray":
        runtime["num_cpus"] = args.num_cpus
        if args.device.startswith("cuda"):
            runtime["clients_per_actor"] = max(1, -(-args.run_clients // args.actors))
            runtime["client_resources"] = {"num_gpus": round(1.0 / args.actors, 4)}
    cfg = dict(algorithm={"name": algorithm, "params": params},
               data={"dataset": dataset, "data_dir": args.data_dir,
                     "partition": {"name": "rotated", "samples": list(args.run_samples)}},
               federation={"n_clients": args.run_clients, "fraction": args.fraction, "rounds": args.rounds},
               seed=0, runtime=runtime)
    if (model_name, args.backend) not in _WARM:  # imports, data set, Ray: not part of the measurement
        fedray.run(**{**cfg, "federation": {**cfg["federation"], "rounds": 1}}, output=None)
        _WARM.add((model_name, args.backend))
    t0 = time.perf_counter()
    res = fedray.run(**cfg, output=None)
    secs = time.perf_counter() - t0
    trained = float(np.nansum(res.history["clients_trained"]))
    n_train = float(np.mean(res.clients["n_samples"])) * (1 - 0.15)  # test_fraction 0.15
    return {"what": "run", "model": model_name, "algorithm": algorithm, "mode": mode, "device": args.device,
            "clients": args.run_clients, "seconds": secs, "samples_per_s": args.epochs * trained * n_train / secs,
            "accuracy": 100 * float(res.final["accuracy"])}


def table(rows: list[dict[str, Any]]) -> str:
    cols = ["what", "model", "algorithm", "mode", "device", "clients", "seconds", "samples_per_s", "speed-up",
            "accuracy"]
    base = {(r["what"], r["model"], r["algorithm"]): r["seconds"] for r in rows if r["mode"] == "per-client"}
    lines = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for r in rows:
        ref = base.get((r["what"], r["model"], r["algorithm"]))
        cells = {**r, "seconds": f"{r['seconds']:.2f}", "samples_per_s": f"{r['samples_per_s']:,.0f}",
                 "speed-up": f"{ref / r['seconds']:.2f}x" if ref else "",
                 "accuracy": f"{r['accuracy']:.2f}" if "accuracy" in r else ""}
        lines.append("| " + " | ".join(str(cells[c]) for c in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=["kernel", "run"], default=None, help="one of the two measurements")
    p.add_argument("--models", nargs="+", default=["cnn8", "cnn28"], choices=sorted(SHAPES))
    p.add_argument("--algorithms", nargs="+", default=["fedavg", "flacc"], choices=["fedavg", "flacc"])
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (algorithm.params.device)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--clients", type=int, default=10, help="kernel: clients of one host (40 x fraction 0.25)")
    p.add_argument("--samples", type=int, default=150, help="kernel: mean rows per client")
    p.add_argument("--repeat", type=int, default=3, help="kernel: timed repetitions")
    p.add_argument("--threads", type=int, default=1, help="kernel: torch threads (as one client actor)")
    p.add_argument("--run-clients", type=int, default=40)
    p.add_argument("--fraction", type=float, default=0.25)
    p.add_argument("--run-samples", nargs=2, type=int, default=[80, 240])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--backend", default="ray", choices=["local", "ray"])
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of the embedded Ray instance")
    p.add_argument("--actors", type=int, default=2, help="client actors sharing the GPU (runs on cuda)")
    p.add_argument("--data-dir", default=os.environ.get("FEDRAY_DATA_DIR"), help="folder holding mnist/")
    p.add_argument("--out", default=None, help="write the table (with uptime) to this markdown file")
    args = p.parse_args(argv)
    before = uptime()
    print(f"uptime before: {before}", flush=True)
    rows: list[dict[str, Any]] = []
    for model_name in args.models:
        for mode in ("per-client", "batched"):
            if args.only in (None, "kernel"):
                rows.append(kernel(model_name, mode, args))
                print(rows[-1], flush=True)
            if args.only in (None, "run"):
                for algorithm in args.algorithms:
                    row = run(model_name, algorithm, mode, args)
                    if row is None:
                        print(f"skipped: {model_name} runs need MNIST (--data-dir with mnist/)", flush=True)
                        continue
                    rows.append(row)
                    print(rows[-1], flush=True)
    order = {"per-client": 0, "batched": 1}
    rows.sort(key=lambda r: (r["what"], r["model"], r["algorithm"], order[r["mode"]]))
    after = uptime()
    md = f"{table(rows)}\n\nuptime before: {before}\nuptime after: {after}\n"
    print(md)
    if args.out:
        Path(args.out).write_text(md)
    return md


if __name__ == "__main__":
    main()
