"""The contract and what every floor stands on: Task, Reply, RoundContext, Params, Algorithm;
Stats; pure numerical helpers; the registry; errors; seeding. Imports nothing above it."""
