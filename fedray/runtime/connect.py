"""Connecting to Ray: an embedded instance, or a cluster checked before ``ray.init``.

* no ``runtime.address`` (and no ``RAY_ADDRESS`` in the environment): fedray
  starts its own instance (``ray.init(address="local")``), whatever other Ray
  clusters run on the machine and whatever stale address file a dead one left;
* ``runtime.address: auto``: the cluster last started on this machine with
  ``ray start`` (its address file), checked like an explicit address;
* ``HOST:PORT`` (the GCS port of a head node, 6379 by default) or
  ``ray://HOST:PORT`` (Ray Client, 10001 by default).

Before ``ray.init`` the address is probed: a TCP connection (a few seconds),
then, for a GCS address, one gRPC call that reads the cluster's Ray and Python
versions. An unreachable address, a port where no Ray answers, or a version
that differs from the driver's fails in seconds with one line naming the
address and what to check, instead of Ray's minutes of retries.
"""
from __future__ import annotations

import json
import logging
import os
import platform
import re
import socket
import sys
import time
from typing import Any

from fedray.core.errors import ConfigError

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 5.0  # seconds per step (TCP connect, gRPC call)
CLIENT_PREFIX = "ray://"


def resolve_address(address: str | None) -> str | None:
    """The address to connect to: None for an embedded instance, else ``host:port`` or ``ray://...``.

    ``RAY_ADDRESS`` in the environment (set e.g. for a Ray Job's entrypoint)
    counts as ``runtime.address`` when that is not set.
    """
    if not address:
        address = os.environ.get("RAY_ADDRESS") or None
        if address:
            log.info("connecting to RAY_ADDRESS=%s (from the environment)", address)
    if not address or address == "local":
        return None
    if address == "auto":
        from ray._private.utils import read_ray_address

        found = os.environ.get("RAY_ADDRESS") or read_ray_address()
        if not found:
            raise ConfigError("runtime.address: 'auto' found no Ray cluster started on this machine (no address file "
                              "of `ray start`); start one with `ray start --head`, give HOST:PORT, or leave "
                              "runtime.address unset for an embedded instance")
        log.info("runtime.address auto -> %s (address file of the last `ray start`)", found)
        return found
    return address


def _host_port(address: str) -> tuple[str, int]:
    rest = address[len(CLIENT_PREFIX):] if address.startswith(CLIENT_PREFIX) else address
    rest = rest.split("/", 1)[0]
    default = 10001 if address.startswith(CLIENT_PREFIX) else 6379
    if rest.startswith("["):  # [ipv6]:port
        host, _, port = rest[1:].partition("]")
        port = port.lstrip(":")
    else:
        host, _, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    if not host:
        raise ConfigError(f"runtime.address: {address!r} is not HOST:PORT, ray://HOST:PORT, auto or unset")
    try:
        return host, int(port) if port else default
    except ValueError:
        raise ConfigError(f"runtime.address: {address!r} has no valid port number") from None


def probe(address: str, timeout: float = PROBE_TIMEOUT) -> dict[str, Any] | None:
    """Check that a Ray cluster answers at ``address``; returns its metadata (versions) when read.

    Raises
    ------
    ConfigError
        Naming the address and what to check, when nothing answers, when what
        answers is not a Ray head, or when its Ray version differs from this driver's.
    """
    host, port = _host_port(address)
    client = address.startswith(CLIENT_PREFIX)
    what = "the Ray Client server port (10001 by default, `ray start --head --ray-client-server-port`)" if client \
        else "the head's GCS port (6379 by default, `ray start --head --port`)"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, socket.timeout) else (exc.strerror or type(exc).__name__)
        raise ConfigError(f"runtime.address: cannot reach a Ray cluster at {address!r} ({reason}); check that the "
                          f"head node runs (`ray status`), the host name, {what}, and firewalls") from None
    if client:
        return None  # Ray Client checks versions itself when it connects
    return _cluster_metadata(address, host, port, timeout)


def _cluster_metadata(address: str, host: str, port: int, timeout: float) -> dict[str, Any] | None:
    """Read the cluster's Ray and Python versions from its GCS (one gRPC call) and compare them."""
    try:
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:  # pragma: no cover - Ray's generated stubs moved: let ray.init check
        return None
    try:
        from ray._common.usage.usage_constants import CLUSTER_METADATA_KEY
        from ray._private.ray_constants import KV_NAMESPACE_CLUSTER
    except ImportError:  # pragma: no cover
        CLUSTER_METADATA_KEY, KV_NAMESPACE_CLUSTER = b"CLUSTER_METADATA", b"cluster"
    channel = grpc.insecure_channel(f"{host}:{port}")
    try:
        stub = gcs_service_pb2_grpc.InternalKVGcsServiceStub(channel)
        reply = stub.InternalKVGet(gcs_service_pb2.InternalKVGetRequest(key=CLUSTER_METADATA_KEY,
                                                                        namespace=KV_NAMESPACE_CLUSTER),
                                   timeout=timeout)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        if code == grpc.StatusCode.UNAUTHENTICATED:
            if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
                return None  # ray.init presents the token
            raise ConfigError(f"runtime.address: the Ray cluster at {address!r} requires token authentication; "
                              "set RAY_AUTH_MODE=token and give its token (RAY_AUTH_TOKEN, or the file "
                              "~/.ray/auth_token of the head node)") from None
        raise ConfigError(f"runtime.address: {address!r} accepts connections but no Ray head answers there "
                          f"({getattr(code, 'name', 'no reply')}); check that the port is the head's GCS port "
                          "(6379 by default; `ray status` on the head prints it), not the dashboard, "
                          "Ray Client or another service") from None
    finally:
        channel.close()
    if not reply.value:
        return None
    try:
        meta = json.loads(reply.value.decode("utf-8"))
    except ValueError:
        return None
    check_versions(address, meta)
    return meta


def check_versions(address: str, meta: dict[str, Any]) -> None:
    """Raise :class:`ConfigError` when the cluster's Ray or Python (major.minor) differ from the driver's."""
    import ray

    theirs_ray, theirs_py = str(meta.get("ray_version", "")), str(meta.get("python_version", ""))
    mine_py = platform.python_version()
    same_py = theirs_py.split(".")[:2] == mine_py.split(".")[:2] if theirs_py else True
    if (theirs_ray and theirs_ray != ray.__version__) or not same_py:
        raise ConfigError(version_message(address, theirs_ray, theirs_py))


def version_message(address: str, cluster_ray: str, cluster_py: str) -> str:
    import ray

    return (f"runtime.address: the Ray cluster at {address!r} runs Ray {cluster_ray or '?'} on Python "
            f"{cluster_py or '?'}, this driver Ray {ray.__version__} on Python {platform.python_version()}; "
            f"install the cluster's versions on the driver (pip install 'ray=={cluster_ray}') or run fedray "
            "on the head node")


def _translate(address: str, exc: BaseException) -> ConfigError | None:
    """One line for the errors ``ray.init`` raises on a bad cluster (None: not one of them)."""
    text = str(exc)
    if "Version mismatch" in text or "version mismatch" in text:

        found = re.search(r"cluster was started with:\s*Ray:\s*(\S+)\s*Python:\s*(\S+)", text)
        cluster_ray, cluster_py = (found.group(1), found.group(2)) if found else ("?", "?")
        return ConfigError(version_message(address, cluster_ray, cluster_py))
    if isinstance(exc, ConnectionError) or "Could not find any running Ray instance" in text:
        return ConfigError(f"runtime.address: could not connect to the Ray cluster at {address!r}: "
                           f"{text.splitlines()[0] if text else type(exc).__name__}; check that it runs (`ray status`)")
    return None


#: Start of the note Ray's raylet sends every driver when a node runs many more worker processes
#: than CPUs ("... worker processes have been started on node ..., which is 4x the maximum expected
#: startup concurrency"). fedray's layouts do that on purpose (``runtime.clients_per_actor``,
#: fractional ``client_resources.num_cpus``), so without ``-v`` it becomes one line of fedray's log.
WORKER_POOL_NOTE = "worker processes have been started on node"


def quiet_worker_pool_note() -> None:
    """Show Ray's worker-pool-size note only when fedray logs at INFO (``-v``); else log it at DEBUG.

    Ray prints messages its raylet pushes to drivers from a background thread through
    ``ray._private.worker.print_to_stdstream``, with no switch of its own; this wraps that one
    function (once) and leaves every other message alone. Without that function (another Ray
    version) nothing changes.
    """
    try:
        from ray._private import worker as ray_worker
    except ImportError:  # pragma: no cover
        return
    shown = getattr(ray_worker, "print_to_stdstream", None)
    if shown is None or getattr(shown, "_fedray_quiet", False):
        return

    def print_to_stdstream(data: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, dict) and data.get("pid") == "raylet" and not log.isEnabledFor(logging.INFO):
            lines = [ln for ln in data.get("lines", []) if WORKER_POOL_NOTE not in str(ln)]
            if len(lines) < len(data.get("lines", [])):
                log.debug("Ray: many worker processes on one node (one per client actor); -v shows Ray's note")
                if not lines:
                    return None
                data = {**data, "lines": lines}
        return shown(data, *args, **kwargs)

    print_to_stdstream._fedray_quiet = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = print_to_stdstream


def connect(address: str | None, num_cpus: int | None = None, **init_kwargs: Any) -> bool:
    """Start an embedded Ray instance or connect to ``address`` after probing it; True if started here.

    Does nothing (returns False) when Ray is already initialised in this process.
    """
    import ray

    if ray.is_initialized():
        return False
    quiet_worker_pool_note()
    if not sys.stderr.isatty():  # notebooks, pipes, CI logs: Ray's actor-log prefixes without colour codes
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                              "log_to_driver": True, "configure_logging": False, **init_kwargs}
    target = resolve_address(address)
    if target is None:
        # fedray's own embedded instance: Ray's banner about token authentication is noise here
        banner = logging.getLogger("ray._private.authentication.authentication_token_setup")
        level = banner.level
        if not log.isEnabledFor(logging.INFO):
            banner.setLevel(logging.ERROR)
        try:
            ray.init(address="local", num_cpus=num_cpus, **kwargs)
        finally:
            banner.setLevel(level)
        return True
    if num_cpus is not None:
        log.warning("runtime.num_cpus=%s is ignored: the cluster at %s decides its CPUs", num_cpus, target)
    t0 = time.monotonic()
    if address == "auto" and not os.environ.get("RAY_AUTH_MODE"):
        # as ray.init(address="auto") does: a local cluster found through its address file
        # may use this machine's token (an explicit address never does)
        try:
            from ray._private.authentication.authentication_token_setup import (
                maybe_enable_token_auth_if_token_available,
            )

            maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
        except ImportError:  # pragma: no cover - Ray without token authentication
            pass
    probe(target)
    if target.startswith(CLIENT_PREFIX):
        kwargs.pop("include_dashboard", None)
    _init_cluster(target, kwargs)
    log.info("connected to the Ray cluster at %s in %.1f s", target, time.monotonic() - t0)
    return True


#: Ray Client's proxy on a busy head sometimes fails to start the server of a new client (its
#: process, or the runtime environment it ships) and answers "Initialization failure from server";
#: Ray has already disconnected the client then, and a new attempt usually succeeds.
CLIENT_ATTEMPTS = 3
TRANSIENT_CLIENT_FAILURE = "Initialization failure from server"


def _init_cluster(target: str, kwargs: dict[str, Any]) -> None:
    """``ray.init`` on a running cluster: one line for its errors, new attempts on a transient one."""
    import ray

    for attempt in range(1, CLIENT_ATTEMPTS + 1):
        try:
            ray.init(address=target, **kwargs)
            return
        except (RuntimeError, ConnectionError) as exc:
            if (target.startswith(CLIENT_PREFIX) and TRANSIENT_CLIENT_FAILURE in str(exc)
                    and attempt < CLIENT_ATTEMPTS):
                log.warning("the Ray cluster at %s could not start this client's server (attempt %d of %d); "
                            "trying again", target, attempt, CLIENT_ATTEMPTS)
                time.sleep(2.0 * attempt)
                continue
            err = _translate(target, exc)
            if err is None:
                raise
            raise err from None
