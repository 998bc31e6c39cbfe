"""Hostile sizes end in one line naming the key before anything is built, never in MemoryError or
a retry loop without end."""
from __future__ import annotations

import pytest

import fedray
from fedray.core.errors import ConfigError

KM = {"name": "kmeans", "params": {"n_clusters": 2}}
LOCAL = {"backend": "local"}


@pytest.mark.parametrize("options", [{"points_per_client": 1e10}, {"points_per_client": "1e10"},
                                     {"n_features": 1e8, "points_per_client": 10_000}])
def test_a_federation_too_large_for_memory_is_refused_up_front(options):
    """On today's main these ended in MemoryError (one shard is generated even when the shards are not
    kept) or a raw int() error for "1e10"."""
    with pytest.raises(ConfigError, match=r"federation.n_clients: 4 clients of .* need about .* of memory"):
        fedray.run(algorithm=KM, data={"dataset": "blobs", "options": options},
                   federation={"n_clients": 4, "rounds": 1}, runtime=LOCAL, progress=False)


def test_round_retries_is_bounded():
    with pytest.raises(ConfigError, match=r"federation.round_retries: .*less than or equal to 1000"):
        fedray.run(algorithm=KM, data={"dataset": "blobs"}, federation={"n_clients": 4, "round_retries": 1e9},
                   runtime=LOCAL, progress=False)
