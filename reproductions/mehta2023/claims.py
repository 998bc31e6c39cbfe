"""The quantitative results of Mehta & Shao (2023), FLACC, as the lab's claims.

Table I's columns, each with FLACC against FedAvg (and, where run, FLACC's control arm) and a row of the
other methods; Tables IV, V and VI (α₀, the memory T, weight updates against gradients) and Fig. 8 on rotated
MNIST; Fig. 5 (FEMNIST); and what was not attempted, with the reason. Records transcribed from the lab
notebook (``notebook.py``) are marked † in the table.
"""
from reproductions.common import Claim

ROBUST = "reproductions.mehta2023.robustness:run_claim"
TABLE1 = "reproductions.mehta2023.table1:run_claim"
RUN = "python -m reproductions run mehta2023/"
FIVE = "--seeds 0 1 2 3 4"
SMALL = "20 clients, c = 0.3, 60–120 samples, E = 5, 30 rounds"
T_VARIANTS = ("T=2", "T=5", "T=10", "T=25", "T=inf")
MAIN = ("flacc", "fedavg", "flacc-control")
OTHERS = ("flacc", "cfl", "ifca", "flhc", "nofed", "per-fedavg", "pfedme", "fedavg")
ROT_PAPER = {"flacc": "97.92 ± 0.01", "fedavg": "95.30 ± 0.31"}
GRP_PAPER = {"flacc": "90.05 ± 0.17", "fedavg": "52.93 ± 2.13"}
SWP_PAPER = {"flacc": "58.30 ± 0.48", "fedavg": "48.30 ± 0.38"}
GPU_HOURS = ("the paper's 100-client CIFAR-10 federations fit the data now (all five batches), but a run of "
             "100 rounds of 20 clients × E = 5 takes about 1.75 h a method and seed on these 2 CPUs (about 63 s a "
             "round), 35 h for FLACC and FedAvg over five seeds and both columns; on one GPU, where a "
             "paper-scale rotated MNIST run took about 2 min, about 1–2 h in all, two runs at a time")

CLAIMS = [
    # ---------------------------------------------------------------------------------------- Table I
    Claim(id="table1-rotated-mnist-paper", where="Table I, rotated MNIST", quantity="test accuracy (%)",
          paper=ROT_PAPER, metric="accuracy", methods=("flacc", "fedavg"), order=("flacc", "fedavg"), tolerance=0.5,
          verdict="reproduced", scale="paper", sizes="100 clients, c = 0.2, 200–800 samples, E = 5, 100 rounds",
          command=f"{RUN}table1-rotated-mnist-paper --scale paper {FIVE}", runner=TABLE1,
          note="one GPU; both FLACC seeds find the four rotations exactly (ARI 1.000); FedAvg seed 0 only; seeds "
               "2–4 and the control arm did not fit the GPU time."),
    Claim(id="table1-rotated-mnist", where="Table I, rotated MNIST", quantity="test accuracy (%)",
          paper={**ROT_PAPER, "flacc-control": "—"}, metric="accuracy", methods=MAIN, order=("flacc", "fedavg"),
          verdict="same ordering", sizes="20 clients, c = 0.3, 200–800 samples, E = 5, 30 rounds",
          command=f"{RUN}table1-rotated-mnist {FIVE}", runner=TABLE1,
          note="FLACC above FedAvg in 5 of 5 seeds, exact clusters in 1 (ARI 0.46–1.00); the control arm (random "
               "groups of the same sizes) 2.3–11.6 points below FLACC. Seeds 1–4: 315–700 s a run, two at a time."),
    Claim(id="table1-rotated-mnist-others", where="Table I, rotated MNIST, all methods", quantity="test accuracy (%)",
          paper={"flacc": "97.92", "cfl": "97.56", "ifca": "98.24 (k = 4)", "flhc": "96.46 (d = 0.75)",
                 "nofed": "91.37", "per-fedavg": "95.55", "pfedme": "96.09", "fedavg": "95.30"},
          metric="accuracy", methods=OTHERS, records="table1-rotated-mnist", select={"seed": 0},
          verdict="reversed", sizes="20 clients, c = 0.3, 200–800 samples, E = 5, 30 rounds, seed 0",
          command="python -m reproductions.mehta2023.table --dataset mnist --data-dir DATA --data-options "
                  "'{\"part\": \"train\"}' --federations rotated --methods local ifca flhc cfl --ifca-k 4 --flhc-d 0.9 "
                  "--seeds 0 --n-clients 20 --fraction 0.3 --samples 200 800 --rounds 30 --epochs 5 --eval-every 5",
          note="FLACC first, IFCA (k = 4, the paper's best) 2.2 below it, where the paper has IFCA first; pFedMe "
               "(λ = 15, β = 2, personal step 0.02, η = 0.005) below Per-FedAvg and NoFed, the paper's reverse."),
    Claim(id="table1-grouped-cifar10", where="Table I, grouped CIFAR-10", quantity="test accuracy (%)",
          paper={**GRP_PAPER, "flacc-alpha0.1": "89.86 ± 0.13 (Table IV, α₀ = +0.1)", "flacc-control": "—"},
          metric="accuracy", methods=("flacc", "flacc-alpha0.1", "fedavg", "flacc-control"),
          order=("flacc", "fedavg"), verdict="same ordering",
          sizes="15 clients (5 groups of 3), c = 0.4, 300–600 samples, E = 2, 25 rounds",
          command=f"{RUN}table1-grouped-cifar10 {FIVE}", runner=TABLE1,
          note="α₀ = 0 (the paper's) never separates at seed 0 (a tie with FedAvg); the control arm is run at "
               "α₀ = +0.1. 158–360 s a run, two at a time."),
    Claim(id="table1-grouped-cifar10-40", where="Table I, grouped CIFAR-10", quantity="test accuracy (%)",
          paper=GRP_PAPER, metric="accuracy", methods=("flacc", "fedavg"), order=("flacc", "fedavg"),
          verdict="same ordering", sizes="40 clients (5 groups of 8), c = 0.3, 300–600 samples, E = 5, 100 rounds",
          command=f"{RUN}table1-grouped-cifar10-40 --seeds 0", runner=TABLE1,
          note="the largest grouped federation CIFAR-10's first batch held; FLACC finds the five groups exactly "
               "(separation at round 27); one seed."),
    Claim(id="table1-grouped-cifar10-others", where="Table I, grouped CIFAR-10, all methods",
          quantity="test accuracy (%)",
          paper={"flacc": "90.05", "flacc-alpha0.1": "—", "ifca": "90.17 (k = 5)", "flhc": "81.89 (d = 0.4)",
                 "cfl": "89.75", "nofed": "80.68", "per-fedavg": "64.16", "fedavg": "52.93"},
          metric="accuracy", methods=("flacc", "flacc-alpha0.1", "ifca", "flhc", "cfl", "nofed", "per-fedavg",
                                      "fedavg"),
          records="table1-grouped-cifar10", select={"seed": 0}, verdict="reversed",
          sizes="15 clients, c = 0.4, 300–600 samples, E = 2, 25 rounds, seed 0",
          command="python -m reproductions.mehta2023.table --dataset cifar10 --data-dir DATA --data-options "
                  "'{\"part\": \"all\"}' --federations grouped --methods local ifca flhc cfl --ifca-k 5 --flhc-d 0.9 "
                  "--seeds 0 --n-clients 15 --fraction 0.4 --samples 300 600 --rounds 25 --epochs 2 --lr 0.075",
          note="IFCA and FL+HC, given the right k or d, find the groups and end above FLACC, which spends 21 of 25 "
               "rounds merging; at 50 rounds FLACC (α₀ = +0.1) 70.55 against IFCA 83.26 (seed 0): IFCA beat FLACC. "
               "CFL never split. pFedMe (λ = 15, β = 6) stayed at chance and was stopped."),
    Claim(id="table1-label-swapped-cifar10", where="Table I, label-swapped CIFAR-10", quantity="test accuracy (%)",
          paper={**SWP_PAPER, "flacc-control": "—"}, metric="accuracy", methods=MAIN, order=("flacc", "fedavg"),
          verdict="reversed", sizes="15 clients (5 groups of 3), c = 0.4, 300–600 samples, E = 2, 25 rounds",
          command=f"{RUN}table1-label-swapped-cifar10 {FIVE}", runner=TABLE1,
          note="FLACC below FedAvg in 4 of 5 seeds and level with its control: its 2–3 clusters never follow the "
               "swap groups (ARI −0.03 to 0.24); every merge comes in rounds 0–9. Untested whether scale fixes it."),
    Claim(id="table1-label-swapped-cifar10-40", where="Table I, label-swapped CIFAR-10",
          quantity="test accuracy (%), the paper's η = 0.075 and E = 5", paper=SWP_PAPER, metric="accuracy",
          methods=("flacc", "fedavg"), verdict="reversed",
          sizes="40 clients (5 groups of 8), c = 0.3, 300–600 samples, E = 5, 100 rounds",
          command=f"{RUN}table1-label-swapped-cifar10-40 --seeds 0", runner=TABLE1,
          note="diverged: NaN models in FLACC and FedAvg alike by round 30, both at chance (a constant prediction): "
               "no ordering. FLACC's clusters at separation had ARI 0.086. Next: η = 0.03–0.05 or clipping."),
    Claim(id="table1-label-swapped-cifar10-e5", where="Table I, label-swapped CIFAR-10",
          quantity="test accuracy (%), E = 5 with η = 0.04", paper={**SWP_PAPER, "flacc-control": "—"},
          metric="accuracy", methods=("flacc", "fedavg"), order=("flacc", "fedavg"), verdict="reversed",
          sizes="15 clients (5 groups of 3), c = 0.4, 300–600 samples, E = 5, η = 0.04, 25 rounds, seed 0",
          runner=TABLE1, command=f"{RUN}table1-label-swapped-cifar10-e5 --seeds 0",
          note="η = 0.04 trains (no divergence at E = 5), but FLACC merged every client into one cluster and ended "
               "equal to FedAvg to the last digit (34.43 %): a tie, not the paper's lead. The update similarity was "
               "0.42 within the swap groups and 0.16 across them (mean cosine over the merging rounds), so the groups are "
               "visible in the updates, yet the merge rule joined them all."),
    Claim(id="table1-label-swapped-cifar10-others", where="Table I, label-swapped CIFAR-10, all methods",
          quantity="test accuracy (%)",
          paper={"flacc": "58.30", "cfl": "55.93", "ifca": "48.57 (k = 5)", "fedavg": "48.30",
                 "flhc": "45.81 (d = 0.9)", "per-fedavg": "45.21", "nofed": "32.64"},
          metric="accuracy", methods=("flacc", "cfl", "ifca", "fedavg", "flhc", "per-fedavg", "nofed"),
          records="table1-label-swapped-cifar10", select={"seed": 0}, verdict="reversed",
          sizes="15 clients, c = 0.4, 300–600 samples, E = 2, 25 rounds, seed 0",
          command="python -m reproductions.mehta2023.table --dataset cifar10 --data-dir DATA --data-options "
                  "'{\"part\": \"all\"}' --federations label-swapped --methods local ifca flhc cfl --ifca-k 5 "
                  "--flhc-d 0.9 --seeds 0 --n-clients 15 --fraction 0.4 --samples 300 600 --rounds 25 --epochs 2 "
                  "--lr 0.075",
          note="no method finds the swap groups in 25 rounds of E = 2; every method within 5.2 points of FedAvg."),
    Claim(id="table1-cifar10-paper-scale", where="Table I, grouped and label-swapped CIFAR-10, 100 clients",
          quantity="test accuracy (%), every method, five seeds", paper={**GRP_PAPER}, verdict="not attempted",
          scale="paper", reason=f"no GPU in this work: {GPU_HOURS}. Command: "
                                f"`{RUN}table1-grouped-cifar10 --scale paper {FIVE}` (and label-swapped)."),
    Claim(id="table1-grouped-rotated-emnist", where="Table I, grouped+rotated EMNIST", quantity="test accuracy (%)",
          paper={"flacc": "93.29 ± 0.11", "fedavg": "73.15 ± 1.49"}, metric="accuracy", methods=("flacc", "fedavg"),
          order=("flacc", "fedavg"), verdict="stand-in data",
          sizes="FEMNIST letters, 40 clients, c = 0.25, 60–150 samples, E = 2, 50 rounds",
          command="python -m reproductions.mehta2023.table --dataset femnist --data-dir DATA --data-options "
                  "'{\"classes\": \"letters\"}' --federations grouped+rotated --partition-options "
                  "'{\"label_sets\": \"case\"}' --methods fedavg flacc --n-clients 40 --fraction 0.25 --samples 60 150 "
                  "--rounds 50 --epochs 2 --lr 0.05 --eval-every 10 --seeds 0",
          note="EMNIST is not in the data folder; FEMNIST's letters stand in. FLACC separates the cases, not the "
               "rotation (ARI 0.50–0.56); both barely trained. FedAvg seed 0 only."),
    Claim(id="table1-femnist", where="Table I, FEMNIST", quantity="test accuracy (%)",
          paper={"flacc": "82.92 ± 0.30", "fedavg": "77.57 ± 0.48", "flacc-control": "—"}, metric="accuracy",
          methods=MAIN, order=("flacc", "fedavg"), verdict="reversed",
          sizes="105 writers, c = 0.2, E = 5, 200 rounds",
          command="python -m reproductions.mehta2023.femnist --data-dir DATA --branch --methods flacc flacc-control "
                  "fedavg --rounds 200 --epochs 5 --eval-every 10 --seeds 0 1",
          note="FedAvg above FLACC in both seeds and in 21 of 23 clusters; the control 1–2 points below FLACC: the "
               "clusters carry little structure. LEAF's 5 % sample holds 105 writers (paper: 195). FedAvg and the "
               "control branch from FLACC's separation round (their wall time is after it)."),
    Claim(id="figure5-femnist", where="Fig. 5, FEMNIST", quantity="final test accuracy (%) of the curves",
          paper={"flacc": "above FedAvg after separation (about round 140)", "fedavg": "below"}, metric="accuracy",
          methods=("flacc", "fedavg"), order=("flacc", "fedavg"), verdict="reversed",
          sizes="105 writers, c = 0.2, E = 1, 100 rounds",
          command="python -m reproductions.mehta2023.femnist --data-dir DATA --rounds 100 --eval-every 10 "
                  "--seeds 0 1 2",
          note="the two curves are one until FLACC separates (rounds 60–68); FLACC drops, climbs back, and ends "
               "7.2 points below FedAvg on average."),
    Claim(id="table3-mixed-fault", where="Tables II–III, mixed fault classification", quantity="test accuracy (%)",
          paper={"flacc": "92.21 ± 0.70", "fedavg": "21.56 ± 1.43"}, verdict="not attempted",
          reason="the rotating-machinery vibration data of Section VI are the authors' own and not public; it "
                 "would take the 23,040 signals, a 1-D CNN (`cnn1d` exists) and 48 clients: minutes a run on a CPU."),
    # ---------------------------------------------------------------------------------------- Tables IV-VI, Fig. 8
    Claim(id="table4-rotated-mnist", where="Table IV, rotated MNIST", quantity="test accuracy (%) by α₀",
          paper={"T=10": "97.92 ± 0.01 (α₀ = 0)", "alpha_0=+0.1": "97.47 ± 0.05", "alpha_0=-0.1": "96.75 ± 0.31"},
          metric="accuracy", by="variant", methods=("T=10", "alpha_0=+0.1", "alpha_0=-0.1"),
          order=("T=10", "alpha_0=+0.1", "alpha_0=-0.1"), records="robustness-rotated-mnist",
          select={"seed": (0, 1, 2, 3, 4)}, verdict="same ordering", sizes=SMALL + ", seeds 0–4",
          command=f"{RUN}table4-rotated-mnist --seeds 0 1 2 3 4", runner=ROBUST,
          note="seeds 0–4: α₀ = 0 best and +0.1 above −0.1, the paper's order, by 1.9 and 0.4 points (paper 0.45 "
               "and 0.72); seed 0 alone had it reversed (+0.1 never separated in 30 rounds there, 79.63)."),
    Claim(id="table4-rotated-mnist-clusters", where="Table IV, rotated MNIST", quantity="clusters found by α₀",
          paper={"alpha_0=+0.1": "12.80 ± 0.98", "T=10": "4 ± 0 (α₀ = 0)", "alpha_0=-0.1": "2 ± 0"},
          metric="n_clusters", by="variant", methods=("alpha_0=+0.1", "T=10", "alpha_0=-0.1"),
          order=("alpha_0=+0.1", "T=10", "alpha_0=-0.1"), records="robustness-rotated-mnist",
          select={"seed": (0, 1, 2, 3, 4)}, verdict="same ordering", sizes=SMALL + ", seeds 0–4",
          command=f"{RUN}table4-rotated-mnist --seeds 0 1 2 3 4", runner=ROBUST,
          note="the paper's order (seeds 0–4): −0.1 merges to 2 clusters in every seed as in the paper; +0.1 ends "
               "with 4–5 where the paper has 12.8, and α₀ = 0 with 3–4 where it has 4."),
    Claim(id="table5-rotated-mnist", where="Table V, rotated MNIST", quantity="test accuracy (%) by memory T",
          paper={"T=2": "97.53 ± 0.15", "T=5": "97.85 ± 0.06", "T=10": "97.92 ± 0.01", "T=25": "97.93 ± 0.09",
                 "T=inf": "97.54 ± 0.23"},
          metric="accuracy", by="variant", methods=T_VARIANTS, order=("T=10", "T=5", "T=inf", "T=2"),
          records="robustness-rotated-mnist", select={"seed": (0, 1, 2, 3, 4)}, verdict="reversed",
          sizes=SMALL + ", seeds 0–4 (T = 25: 1–4)", command=f"{RUN}table5-rotated-mnist --seeds 0 1 2 3 4", runner=ROBUST,
          note="seeds 0–4: T = 10 best and T = 2 worst as in the paper, but T = 5 below T = ∞ (by 0.97; the paper "
               "has it 0.31 above). In seeds 2 and 4 every merge comes within 5 rounds: T = 5, 10, 25, ∞ are one run."),
    Claim(id="table5-rotated-mnist-clusters", where="Table V, rotated MNIST", quantity="clusters found by memory T",
          paper={"T=2": "3.8 ± 0.4", "T=5": "4 ± 0", "T=10": "4 ± 0", "T=25": "4 ± 0", "T=inf": "6.80 ± 0.98"},
          metric="n_clusters", by="variant", methods=T_VARIANTS, records="robustness-rotated-mnist",
          select={"seed": (0, 1, 2, 3, 4)}, verdict="same ordering", sizes=SMALL + ", seeds 0–4 (T = 25: 1–4)",
          command=f"{RUN}table5-rotated-mnist --seeds 0 1 2 3 4", runner=ROBUST,
          note="the clusters grow with the memory, as in the paper (seeds 0–4); in seed 0 only T = 10 finds the "
               "four rotations exactly (ARI 1.000; T = 2: 0.849, T = 5: 0.342, T = ∞: 0.886)."),
    Claim(id="table6-rotated-mnist", where="Table VI, rotated MNIST",
          quantity="test accuracy (%), weight updates (T=10) against gradients",
          paper={"T=10": "97.92 ± 0.01", "gradients": "97.69 ± 0.02"}, metric="accuracy", by="variant",
          methods=("T=10", "gradients"), order=("T=10", "gradients"), records="robustness-rotated-mnist",
          select={"seed": (0, 1, 2, 3, 4)}, verdict="same ordering", sizes=SMALL + ", seeds 0–4",
          command=f"{RUN}table6-rotated-mnist --seeds 0 1 2 3 4", runner=ROBUST,
          note="the paper's order over seeds 0–4, by 2.05 points (paper 0.23), but weight updates lead in only 3 of "
               "the 5 seeds (by 9.9, 1.9 and 3.9; gradients by 2.7 and 2.8 in seeds 2 and 4)."),
    Claim(id="table6-rotated-mnist-clusters", where="Table VI, rotated MNIST",
          quantity="clusters found, weight updates (T=10) against gradients",
          paper={"T=10": "4 ± 0", "gradients": "4 ± 0"}, metric="n_clusters", by="variant",
          methods=("T=10", "gradients"), records="robustness-rotated-mnist", select={"seed": (0, 1, 2, 3, 4)},
          verdict="reversed", sizes=SMALL + ", seeds 0–4",
          command=f"{RUN}table6-rotated-mnist --seeds 0 1 2 3 4", runner=ROBUST,
          note="not the paper's: over seeds 0–4 gradients find 3.2 clusters and weight updates 3.4 (ARI 0.075 "
               "and 1.000 in seed 0), where the paper finds 4 with both."),
    Claim(id="figure8-rotated-mnist", where="Fig. 8a, rotated MNIST",
          quantity="spread of α_min_cross between merging rounds (std of its round-to-round steps)",
          paper={"gradients": "more variable", "T=10": "less variable (weight updates)"}, metric="amc_step_std",
          by="variant", methods=("gradients", "T=10"), order=("gradients", "T=10"), records="robustness-rotated-mnist",
          select={"seed": (0, 1, 2, 3, 4)}, verdict="same ordering", sizes=SMALL + ", seeds 0–4", digits=3,
          command=f"{RUN}figure8-rotated-mnist --seeds 0 1 2 3 4",
          runner=ROBUST,
          note="α_min_cross of every merging round is in the records (metrics.alpha_min_cross); "
               "`python -m reproductions.mehta2023.figure8` draws the figure from them."),
    Claim(id="tables4-6-cifar10-emnist", where="Tables IV–VI and Fig. 8, CIFAR-10 and EMNIST columns",
          quantity="test accuracy and clusters by α₀, T and similarity", paper={"": "see the paper"},
          verdict="not attempted",
          reason="not run for time: on the reduced 15-client CIFAR-10 federations a run takes 3–15 min on these "
                 "2 CPUs, so the three tables are about 2–4 h a seed; at the paper's scale they need a GPU "
                 "(see table1-cifar10-paper-scale). EMNIST is not in the data folder."),
]
