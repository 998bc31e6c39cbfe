"""fedray's lab: one folder per paper, its claims, the recorded runs behind them, and one command per claim.

``python -m reproductions list`` shows every claim with its verdict; ``python -m reproductions run
PAPER/CLAIM`` reruns one and records it; ``python -m reproductions tables`` regenerates the tables.
"""
