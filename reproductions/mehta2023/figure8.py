"""Mehta & Shao (2023), Fig. 8: alpha_min_cross, the value that solves (9), at every merging round, with weight
updates against gradients, drawn from the records of Table VI (``results/robustness-rotated-mnist.csv``).

    python -m reproductions.mehta2023.figure8 --out figure8.png
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from reproductions.common import recorded

log = logging.getLogger("mehta2023.figure8")
LABELS = {"T=10": "weight updates", "gradients": "gradients"}


def draw(out: Path, scale: str = "reduced") -> Path:
    """One line per (similarity, seed): alpha_min_cross over the merging rounds; the paper's alpha_0 = 0 dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = recorded("mehta2023", "robustness-rotated-mnist")
    df = df[(df["scale"] == scale) & df["variant"].isin(list(LABELS))]
    if df.empty:
        raise SystemExit("no record of Table VI yet: `python -m reproductions run mehta2023/table6-rotated-mnist`")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    colours = {"T=10": "tab:blue", "gradients": "tab:orange"}
    for _, r in df.sort_values(["variant", "seed"]).iterrows():
        amc = json.loads(r["metrics"]).get("alpha_min_cross") or []
        ax.plot(range(len(amc)), [float("nan") if v is None else v for v in amc], color=colours[r["variant"]],
                lw=1.2, alpha=0.8, label=f"{LABELS[r['variant']]}, seed {r['seed']}")
    ax.axhline(0.0, color="grey", ls=":", lw=1)
    ax.set_xlabel("round (merging phase)")
    ax.set_ylabel("α_min_cross solving (9)")
    ax.set_title(f"rotated MNIST ({df['sizes'].iloc[0]})", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    log.info("wrote %s", out)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="fedray-output/mehta2023/figure8.png")
    p.add_argument("--scale", default="reduced", choices=("reduced", "paper"))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    draw(Path(args.out), args.scale)


if __name__ == "__main__":
    main()
