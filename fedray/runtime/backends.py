"""The executor for a configured backend (``runtime.backend``: ``local`` or ``ray``)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedray.core.errors import ConfigError
from fedray.data.federation import ClientSpec
from fedray.runtime.executor import Executor
from fedray.runtime.local import LocalExecutor
from fedray.runtime.ray_executor import RayExecutor


def make_executor(backend: str, specs: Sequence[ClientSpec], seed: int, supervised: bool,
                  sample_shape: tuple[int, ...], runtime: Any, runtime_env: dict[str, Any] | None = None,
                  preload: tuple[str, ...] = (), resident: bool = True) -> Executor:
    """Build the executor for ``backend`` (shards are built where the clients live). ``preload``:
    packages the client actors import in the background as they start (:func:`fedray.core.extras.preload`);
    ``resident``: whether hosts keep their shards (see :func:`fedray.data.federation.shard_residency`)."""
    if backend == "local":
        return LocalExecutor(specs, seed, supervised, sample_shape, runtime=runtime, resident=resident)
    if backend == "ray":
        return RayExecutor(specs, seed, supervised, sample_shape, runtime=runtime, runtime_env=runtime_env,
                           preload=preload, resident=resident)
    raise ConfigError(f"runtime.backend: must be 'local' or 'ray'; got {backend!r}")
