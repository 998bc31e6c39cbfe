"""The papers' experiments and tables (experiments/), run end to end in --quick mode."""
