"""Numbers of earlier runs of FLACC and its baselines, transcribed from the lab notebook (``docs/reproductions.md``
at commit 54116ca, now ``docs/notes/lab-notebook-2026.md``), whose raw records were not kept.

Each entry is written as a record with ``source="notebook@54116ca"`` (marked † in the tables), with the seed,
scale, sizes, device, wall time and load as the notebook states them: a wall time the notebook gives only as a
range over several runs is NaN here (the claim's note gives the range), and a load it does not state is
"unknown". Writing is idempotent (entries already recorded are skipped)::

    python -m reproductions.mehta2023.notebook
"""
from __future__ import annotations

import logging

from reproductions.common import pending, record_run

PAPER, SOURCE = "mehta2023", "notebook@54116ca"
NAN = float("nan")
CPU, GPU = "2 CPUs (shared)", "NVIDIA H200 (GPU)"
ROT = "20 clients (rotations to 2/4/6/8), c = 0.3, 200–800 samples, E = 5, η = 0.1, 30 rounds, cnn28"
CIFAR15 = "15 clients (5 groups of 3), c = 0.4, 300–600 samples, E = 2, η = 0.075, 25 rounds, cnn32"
CIFAR40 = "40 clients (5 groups of 8), c = 0.3, 300–600 samples, E = 5, η = 0.075, 100 rounds, cnn32"
FEMNIST = "105 writers (LEAF's 5 % sample), c = 0.2, E = 5, η = 0.05, 200 rounds, cnn28"
FEMNIST_E1 = "105 writers (LEAF's 5 % sample), c = 0.2, E = 1, η = 0.05, 100 rounds, cnn28"
LETTERS = "FEMNIST letters: 40 clients, c = 0.25, 60–150 samples, E = 2, η = 0.05, 50 rounds, cnn28"


def _runs(values: list[float], **extra_by_seed: list) -> list[dict]:
    """One entry a seed (0, 1, ...): the accuracy and the seed's further metrics."""
    out = []
    for seed, acc in enumerate(values):
        metrics = {"accuracy": acc, **{k: v[seed] for k, v in extra_by_seed.items()}}
        out.append({"seed": seed, "metrics": metrics})
    return out


def entries() -> list[tuple[str, str, str, str, str, list[dict], list[float], list[str]]]:
    """(records, method, scale, sizes, device, runs, wall_s by seed, load by seed)."""
    five_nan, five_34 = [NAN] * 5, ["3–4"] * 5
    return [
        # Table I, rotated MNIST at the paper's scale on one GPU (2026-11-27)
        ("table1-rotated-mnist-paper", "flacc", "paper", "100 clients, c = 0.2, 200–800 samples, E = 5, 100 rounds",
         GPU, _runs([98.18, 98.20], n_clusters=[4, 4], ari=[1.0, 1.0], separation_round=[67, 57]), [137, 127],
         ["unknown", "unknown"]),
        ("table1-rotated-mnist-paper", "fedavg", "paper", "100 clients, c = 0.2, 200–800 samples, E = 5, 100 rounds",
         GPU, _runs([95.01]), [106], ["unknown"]),
        # Table I, rotated MNIST, reduced, five seeds (seed 0 alone first; seeds 1-4 two runs at a time, load 3-4)
        ("table1-rotated-mnist", "flacc", "reduced", ROT, CPU,
         _runs([97.85, 94.13, 93.97, 89.16, 95.65], n_clusters=[4, 3, 4, 3, 3],
               ari=[1.0, 0.897, 0.526, 0.461, 0.803]), [1719, *five_nan[1:]], ["35–40", *five_34[1:]]),
        ("table1-rotated-mnist", "fedavg", "reduced", ROT, CPU, _runs([88.64, 88.18, 87.11, 88.58, 88.71]),
         [1566, *five_nan[1:]], ["9–43", *five_34[1:]]),
        ("table1-rotated-mnist", "flacc-control", "reduced", ROT, CPU, _runs([86.26, 84.22, 84.85, 86.91, 86.05]),
         [829, *five_nan[1:]], ["6–34", *five_34[1:]]),
        # the other methods on the same federation, seed 0 (load 3-8; pFedMe 2-3)
        ("table1-rotated-mnist", "nofed", "reduced", ROT, CPU, _runs([92.28]), [NAN], ["unknown"]),
        ("table1-rotated-mnist", "per-fedavg", "reduced", ROT, CPU, _runs([92.57]), [918], ["3–8"]),
        ("table1-rotated-mnist", "pfedme", "reduced", ROT, CPU, _runs([88.86]), [2232], ["2–3"]),
        ("table1-rotated-mnist", "ifca", "reduced", ROT, CPU, _runs([95.65], n_clusters=[3], ari=[0.718]), [2201],
         ["3–8"]),
        ("table1-rotated-mnist", "flhc", "reduced", ROT, CPU, _runs([95.47], n_clusters=[19], ari=[0.029]), [479],
         ["3–8"]),
        ("table1-rotated-mnist", "cfl", "reduced", ROT, CPU, _runs([96.22], n_clusters=[2], ari=[0.441]), [2139],
         ["3–8"]),
        # Table I, grouped CIFAR-10, reduced (FedAvg's seed 0 is FLACC's alpha_0 = 0 run, which never separated)
        ("table1-grouped-cifar10", "flacc", "reduced", CIFAR15, CPU,
         _runs([19.56, 52.00, 73.64, 54.57, 33.33], n_clusters=[3, 5, 5, 4, 4], ari=[0.354, 0.462, 1.0, 0.471, 0.2]),
         [515, *five_nan[1:]], ["14–22", *five_34[1:]]),
        ("table1-grouped-cifar10", "flacc-alpha0.1", "reduced", CIFAR15, CPU,
         _runs([67.69, 49.58, 73.64, 60.36, 43.29], n_clusters=[5] * 5, ari=[0.811, 0.811, 1.0, 0.720, 0.370]),
         [436, *five_nan[1:]], ["8–13", *five_34[1:]]),
        ("table1-grouped-cifar10", "fedavg", "reduced", CIFAR15, CPU, _runs([19.56, 19.48, 22.31, 18.76, 9.64]),
         five_nan, ["14–22", *five_34[1:]]),
        ("table1-grouped-cifar10", "flacc-control", "reduced", CIFAR15, CPU,
         _runs([33.81, 21.87, 27.82, 38.14, 20.79]), [832, *five_nan[1:]], ["8–9", *five_34[1:]]),
        ("table1-grouped-cifar10", "nofed", "reduced", CIFAR15, CPU, _runs([68.47]), [1376], ["2–4"]),
        ("table1-grouped-cifar10", "per-fedavg", "reduced", CIFAR15, CPU, _runs([25.77]), [682], ["2–4"]),
        ("table1-grouped-cifar10", "ifca", "reduced", CIFAR15, CPU, _runs([72.86], ari=[1.0]), [475], ["3–8"]),
        ("table1-grouped-cifar10", "flhc", "reduced", CIFAR15, CPU, _runs([75.30], n_clusters=[5], ari=[1.0]), [176],
         ["3–8"]),
        ("table1-grouped-cifar10", "cfl", "reduced", CIFAR15, CPU, _runs([29.80], n_clusters=[1]), [636], ["3–8"]),
        # grouped CIFAR-10 on 40 clients, the paper's E and rounds (2026-11-28, load 3)
        ("table1-grouped-cifar10-40", "flacc", "reduced", CIFAR40, CPU,
         _runs([87.83], n_clusters=[5], ari=[1.0], separation_round=[27]), [4357], ["3"]),
        ("table1-grouped-cifar10-40", "fedavg", "reduced", CIFAR40, CPU, _runs([42.56]), [3417], ["3"]),
        # Table I, label-swapped CIFAR-10, reduced
        ("table1-label-swapped-cifar10", "flacc", "reduced", CIFAR15, CPU,
         _runs([32.93, 32.63, 28.15, 28.73, 32.08], n_clusters=[2, 3, 2, 2, 2],
               ari=[-0.032, 0.083, 0.189, 0.240, 0.146]), [329, *five_nan[1:]], ["4–9", *five_34[1:]]),
        ("table1-label-swapped-cifar10", "fedavg", "reduced", CIFAR15, CPU, _runs([36.30, 34.61, 23.64, 33.22, 34.46]),
         [213, *five_nan[1:]], ["3–9", *five_34[1:]]),
        ("table1-label-swapped-cifar10", "flacc-control", "reduced", CIFAR15, CPU,
         _runs([33.96, 31.51, 24.59, 32.08, 32.22]), [561, *five_nan[1:]], ["6–17", *five_34[1:]]),
        ("table1-label-swapped-cifar10", "nofed", "reduced", CIFAR15, CPU, _runs([22.76]), [3335], ["2–4"]),
        ("table1-label-swapped-cifar10", "per-fedavg", "reduced", CIFAR15, CPU, _runs([38.10]), [451], ["2–4"]),
        ("table1-label-swapped-cifar10", "ifca", "reduced", CIFAR15, CPU, _runs([36.47], n_clusters=[1], ari=[0.0]),
         [783], ["3–8"]),
        ("table1-label-swapped-cifar10", "flhc", "reduced", CIFAR15, CPU, _runs([31.11], n_clusters=[6], ari=[0.689]),
         [288], ["3–8"]),
        ("table1-label-swapped-cifar10", "cfl", "reduced", CIFAR15, CPU, _runs([36.25], n_clusters=[1]), [670],
         ["3–8"]),
        # label-swapped CIFAR-10 on 40 clients with the paper's eta and E: both diverged (NaN models by round 30)
        ("table1-label-swapped-cifar10-40", "flacc", "reduced", CIFAR40, CPU, _runs([9.57], found_ari=[0.086]),
         [3118], ["2–3"]),
        ("table1-label-swapped-cifar10-40", "fedavg", "reduced", CIFAR40, CPU, _runs([9.57]), [3117], ["2–3"]),
        # Table I, FEMNIST on the paper's schedule (FedAvg and the control branched from FLACC's separation round)
        ("table1-femnist", "flacc", "reduced", FEMNIST, CPU,
         _runs([81.16, 79.58], n_clusters=[10, 13], separation_round=[72, 63]), [4930 + 8964, 4099 + 14379],
         ["6–40", "unknown"]),
        ("table1-femnist", "fedavg", "reduced", FEMNIST, CPU, _runs([84.38, 83.87]), [6295, 10495],
         ["6–40", "unknown"]),
        ("table1-femnist", "flacc-control", "reduced", FEMNIST, CPU, _runs([80.07, 77.41]), [5860, 9974],
         ["6–40", "unknown"]),
        # Fig. 5, FEMNIST with E = 1 and 100 rounds
        ("figure5-femnist", "fedavg", "reduced", FEMNIST_E1, CPU, _runs([66.96, 66.55, 64.18]), [NAN] * 3,
         ["1–23"] * 3),
        ("figure5-femnist", "flacc", "reduced", FEMNIST_E1, CPU,
         _runs([59.17, 57.87, 59.02], n_clusters=[10, 11, 9], separation_round=[68, 61, 60]), [NAN] * 3, ["1–23"] * 3),
        # Table I, grouped+rotated EMNIST: FEMNIST's letters stand in
        ("table1-grouped-rotated-emnist", "fedavg", "reduced", LETTERS, CPU, _runs([11.67]), [NAN], ["4–23"]),
        ("table1-grouped-rotated-emnist", "flacc", "reduced", LETTERS, CPU,
         _runs([19.45, 16.72, 23.51], n_clusters=[2, 3, 2], ari=[0.564, 0.495, 0.564]), [NAN] * 3, ["4–23"] * 3),
    ]


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for records, method, scale, sizes, device, runs, walls, loads in entries():
        todo = {int(r["seed"]) for r in pending(PAPER, records, [{"method": method, "seed": r["seed"], "scale": scale}
                                                                 for r in runs])}
        for run, wall, load in zip(runs, walls, loads):
            if run["seed"] in todo:
                record_run(PAPER, records, method=method, seed=run["seed"], scale=scale, sizes=sizes,
                           metrics=run["metrics"], wall_s=wall, load=load, device=device, source=SOURCE)


if __name__ == "__main__":
    main()
