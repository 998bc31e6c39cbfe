"""Connecting to Ray: embedded means embedded, ``auto`` joins, a wrong address fails fast.

* Without ``runtime.address`` fedray starts its own Ray instance, also while
  another local cluster runs (started here with ``ray start``, its address file
  where ``ray.init`` looks) and after that cluster was killed (a stale address
  file). Before, ``ray.init`` joined that cluster and failed on ``num_cpus``.
* ``runtime.address: auto`` joins the running cluster (proved by a custom
  resource only that cluster offers) and, once it is dead, fails in seconds
  with one line.
* An unreachable address (``127.0.0.1:1``) fails within the acceptance bound
  of 30 s with one line naming the address and what to check; so do a port
  where no Ray head answers and a Ray version that differs from the driver's.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fedray.core.errors import ConfigError
from fedray.runtime.connect import _translate, check_versions, probe, resolve_address
from tests import raynodes


def _fedray(args: list[str], env: dict, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedray.tools.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("fedray: error:")]


def test_unreachable_address_fails_fast_with_one_line(tmp_path):
    env = dict(os.environ, RAY_TMPDIR=str(tmp_path))
    env.pop("RAY_ADDRESS", None)
    t0 = time.monotonic()
    proc = _fedray(["run", "--set", "runtime.address=127.0.0.1:1", "--out", str(tmp_path / "out")], env, tmp_path)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = _error_lines(proc)
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "'127.0.0.1:1'" in errors[0] and "ray status" in errors[0] and "port" in errors[0]
    assert elapsed < 30, f"took {elapsed:.1f} s"  # the acceptance bound, not a benchmark


def test_port_without_a_ray_head_is_named():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        accepted: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:  # accept and say nothing, as a non-Ray service would
            server.settimeout(0.2)
            while not stop.is_set():
                try:
                    accepted.append(server.accept()[0])
                except OSError:
                    pass

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        try:
            with pytest.raises(ConfigError, match=rf"'127.0.0.1:{port}' accepts connections but no Ray head"):
                probe(f"127.0.0.1:{port}", timeout=2.0)
        finally:
            stop.set()
            t.join()
            for c in accepted:
                c.close()


def test_version_mismatch_is_one_line():
    import ray

    with pytest.raises(ConfigError) as err:
        check_versions("head:6379", {"ray_version": "2.9.3", "python_version": "3.10.12"})
    msg = str(err.value)
    assert "\n" not in msg and "Ray 2.9.3" in msg and f"Ray {ray.__version__}" in msg and "ray==2.9.3" in msg
    check_versions("head:6379", {"ray_version": ray.__version__, "python_version": ".".join(
        map(str, sys.version_info[:3]))})  # same versions: no error
    # the same message when ray.init itself detects the mismatch (e.g. through Ray Client)
    ray_text = ("Version mismatch: The cluster was started with:\n    Ray: 2.9.3\n    Python: 3.10.12\n"
                "This process on node 10.0.0.1 was started with:\n    Ray: 2.60.0\n    Python: 3.11.7\n")
    translated = _translate("ray://head:10001", RuntimeError(ray_text))
    assert isinstance(translated, ConfigError) and "Ray 2.9.3" in str(translated) and "\n" not in str(translated)


def test_address_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no address file here
    assert resolve_address(None) is None and resolve_address("local") is None
    with pytest.raises(ConfigError, match="'auto' found no Ray cluster"):
        resolve_address("auto")
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("10.1.2.3:6380")
    assert resolve_address("auto") == "10.1.2.3:6380"
    assert resolve_address(None) is None, "without runtime.address fedray never joins the address file's cluster"
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert resolve_address(None) == "ray://head:10001"  # e.g. the entrypoint of a Ray Job


@pytest.mark.slow
def test_quickstart_is_embedded_while_a_cluster_runs_and_after_it_died():
    tmp = raynodes.short_tmp("frcn")
    try:
        with raynodes.RayNodes(tmp) as nodes:
            nodes.start_head(num_cpus=1, resources={"fr_marker": 1})
            env = nodes.env  # RAY_TMPDIR: ray.init would find this cluster's address file
            assert (tmp / "ray" / "ray_current_cluster").read_text().strip().endswith(f":{nodes.port}")
            work = tmp / "work"
            work.mkdir()

            quick = _fedray(["quickstart", "-q", "--out", str(work / "q1")], env, work)
            assert quick.returncode == 0, quick.stderr[-3000:]
            assert json.loads((work / "q1" / "summary.json").read_text())["final"]["center_distance_to_central"] < 1e-9

            # `auto` joins the running cluster: only it offers fr_marker
            joined = _fedray(["quickstart", "-q", "--out", str(work / "q2"), "--set", "runtime.address=auto",
                              "--set", "runtime.client_resources.custom.fr_marker=1"], env, work)
            assert joined.returncode == 0, joined.stderr[-3000:]

            nodes.kill(nodes.procs[0], signal.SIGKILL)  # dies without cleaning up: the address file stays
            nodes.procs = []
            assert (tmp / "ray" / "ray_current_cluster").exists()

            again = _fedray(["quickstart", "-q", "--out", str(work / "q3")], env, work)
            assert again.returncode == 0, again.stderr[-3000:]

            t0 = time.monotonic()
            stale = _fedray(["quickstart", "-q", "--out", str(work / "q4"), "--set", "runtime.address=auto"],
                            env, work)
            assert stale.returncode == 2 and len(_error_lines(stale)) == 1, stale.stderr[-3000:]
            assert f":{nodes.port}'" in _error_lines(stale)[0]
            assert time.monotonic() - t0 < 30
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _failing_init(monkeypatch, failures: int) -> list[str]:
    """ray.init that fails like Ray Client's proxy on a busy head ``failures`` times, then connects."""
    import ray

    from fedray.runtime import connect as conn

    calls: list[str] = []

    def init(address: str, **kwargs) -> None:
        calls.append(address)
        if len(calls) <= failures:
            raise ConnectionAbortedError("Initialization failure from server:\nTraceback ...")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(conn.time, "sleep", lambda s: None)
    return calls


def test_a_client_server_that_fails_to_start_is_asked_again(monkeypatch, caplog):
    """Ray Client's "Initialization failure from server" is transient: fedray tries again (with a
    warning) and connects; other errors, and other addresses, are not retried."""
    from fedray.runtime.connect import CLIENT_ATTEMPTS, _init_cluster

    calls = _failing_init(monkeypatch, CLIENT_ATTEMPTS - 1)
    _init_cluster("ray://head:10001", {})
    assert len(calls) == CLIENT_ATTEMPTS
    assert sum("could not start this client's server" in r.getMessage() for r in caplog.records) == CLIENT_ATTEMPTS - 1


def test_a_client_server_that_never_starts_fails_in_one_line(monkeypatch):
    from fedray.runtime.connect import CLIENT_ATTEMPTS, _init_cluster

    calls = _failing_init(monkeypatch, CLIENT_ATTEMPTS)
    with pytest.raises(ConfigError, match=r"^runtime\.address: could not connect to the Ray cluster at "
                                          r"'ray://head:10001': Initialization failure from server:; check"):
        _init_cluster("ray://head:10001", {})
    assert len(calls) == CLIENT_ATTEMPTS
    calls = _failing_init(monkeypatch, 1)  # a GCS address (not Ray Client): no second attempt
    with pytest.raises(ConfigError, match="could not connect"):
        _init_cluster("10.0.0.1:6379", {})
    assert len(calls) == 1
