"""Real Ray nodes for tests: ``ray start --block`` processes on free ports, stopped by their own ids.

Every node runs in its own process group, on ports picked here (never Ray's
defaults, so other Ray instances on the machine are not disturbed), with its
temporary files under the test's folder. :meth:`RayNodes.stop` kills exactly
those process groups; nothing here runs ``ray stop`` or kills by name.

A second virtual environment for worker nodes (:func:`worker_venv`) has Ray and
fedray's dependencies at the versions of the test's environment but not fedray.
It is built once from the test's own site-packages (no download) and kept under
the system temporary folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def short_tmp(prefix: str = "fr") -> Path:
    """A short folder under /tmp (Ray's Unix socket paths must stay under ~107 characters)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp" if os.path.isdir("/tmp") else None))


class RayNodes:
    """A head node and worker nodes started with ``ray start --block``, each in its own process group."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = Path(tmp)
        self.procs: list[subprocess.Popen] = []
        self.port: int | None = None
        self.client_port: int | None = None
        self.env = dict(os.environ)
        self.env.pop("RAY_ADDRESS", None)
        self.env["RAY_TMPDIR"] = str(self.tmp)  # the address file of `ray start` goes here, not /tmp/ray
        self.env["RAY_USAGE_STATS_ENABLED"] = "0"
        # Ray 2.60 turns token authentication on when ~/.ray/auth_token exists, and a driver that
        # names an address explicitly does not send it: keep these test clusters without tokens.
        self.env["RAY_AUTH_MODE"] = "disabled"
        # A node's raylet waits this long for its dashboard agent to start (30 s by default); a worker node's
        # agent imports Ray's dashboard stack and takes longer than that on a loaded 2-core machine.
        self.env["RAY_agent_register_timeout_ms"] = "180000"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def client_address(self) -> str:
        """Ray Client's address of the head (``ray://``)."""
        return f"ray://127.0.0.1:{self.client_port}"

    def _ports(self) -> list[str]:
        lo = free_port()
        # a window of worker ports (Ray needs a range); picked below the ephemeral start (32768) and above
        # Ray's fixed default ports (Ray Client's 10001 is in every node's list, and Ray refuses a window
        # that covers it: "worker_ports is trying to use a port number 10001")
        base = 10200 + (lo % 20000)
        return ["--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
                "--min-worker-port", str(base), "--max-worker-port", str(base + 199),
                "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
                "--metrics-export-port", str(free_port()), "--runtime-env-agent-port", str(free_port())]

    def _start(self, ray_exe: str, args: list[str], log_name: str) -> subprocess.Popen:
        log = open(self.tmp / log_name, "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([ray_exe, "start", "--block", "--disable-usage-stats", *args, *self._ports()],
                                env=self.env, cwd=self.tmp, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def start_head(self, num_cpus: int = 1, resources: dict | None = None, num_gpus: int | None = None) -> str:
        """Start the head; ``num_gpus`` declares GPUs (Ray then sets each GPU actor's CUDA_VISIBLE_DEVICES,
        also on a machine without any)."""
        self.port = free_port()
        self.client_port = free_port()
        ray_exe = str(Path(sys.executable).with_name("ray"))
        self._start(ray_exe, ["--head", "--port", str(self.port), "--num-cpus", str(num_cpus),
                              "--include-dashboard=false", "--ray-client-server-port", str(self.client_port),
                              "--temp-dir", str(self.tmp / "ray"),
                              "--resources", json.dumps(resources or {}),
                              *(["--num-gpus", str(num_gpus)] if num_gpus is not None else [])], "head.log")
        self.wait_nodes(1)
        return self.address

    def start_worker(self, python: str | Path | None = None, num_cpus: int = 2,
                     resources: dict | None = None, expect: int | None = None) -> None:
        ray_exe = str(Path(python).with_name("ray")) if python else str(Path(sys.executable).with_name("ray"))
        n = len(self.procs) + 1
        self._start(ray_exe, ["--address", self.address, "--num-cpus", str(num_cpus),
                              "--resources", json.dumps(resources or {})], f"worker{n}.log")
        self.wait_nodes(expect or n)

    def wait_nodes(self, n: int, timeout: float = 120.0) -> None:
        """Wait until ``n`` nodes are alive (asked through the state API of the head, from a child process)."""
        deadline = time.monotonic() + timeout
        probe = [sys.executable, "-c",
                 f"import json, ray; ray.init(address='{self.address}', logging_level='ERROR', "
                 "configure_logging=False, include_dashboard=False); "
                 "print(json.dumps(sum(1 for x in ray.nodes() if x['Alive'])))"]
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Ray node exited ({p.returncode}): " + self.logs())
            if self.port is not None and _port_open(self.port):
                out = subprocess.run(probe, env=self.env, capture_output=True, text=True, timeout=60)
                lines = [ln for ln in out.stdout.splitlines() if ln.strip().isdigit()]
                if lines and int(lines[-1]) >= n:
                    return
            time.sleep(1.0)
        raise RuntimeError(f"{n} Ray nodes not alive after {timeout:.0f} s: " + self.logs())

    def logs(self) -> str:
        out = []
        files = sorted(self.tmp.glob("*.log")) + sorted(self.tmp.glob("ray/session_latest/logs/ray_client_server*.err"))
        for f in files:
            out.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-2000:])
        return "\n".join(out)

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGTERM, wait: float = 10.0) -> None:
        """Stop one node: signal its process group, then SIGKILL what is left."""
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def stop(self) -> None:
        # workers first, then the head
        for proc in reversed(self.procs):
            self.kill(proc)
        self.procs = []

    def __enter__(self) -> RayNodes:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def _site_dirs() -> list[Path]:
    """This environment's site-packages folders (purelib and platlib, once each)."""
    paths = sysconfig.get_paths()
    return [Path(p) for p in dict.fromkeys((paths["purelib"], paths["platlib"])) if Path(p).is_dir()]


def _is_fedray(entry: Path) -> bool:
    """fedray's own entries in site-packages: the package, its metadata, an editable install's finder
    or path file (which would put the source tree on the worker's path)."""
    name = entry.name.lower()
    if name == "fedray" or name.startswith(("fedray-", "__editable__.fedray", "__editable___fedray")):
        return True
    if entry.suffix == ".pth" and entry.is_file():
        text = entry.read_text(errors="replace")
        return "fedray" in text.lower() or str(REPO) in text
    return False


def worker_venv() -> Path:
    """Python of a virtual environment with this environment's packages (Ray and fedray's
    dependencies at the same versions) but not fedray.

    Nothing is downloaded: the environment is made with ``venv --without-pip`` from the test's
    interpreter (Ray requires the same Python version on every node) and sees a folder of links
    to every entry of this environment's site-packages except fedray's own (:func:`_is_fedray`),
    added as a site folder. It is kept in ``$FEDRAY_TEST_VENVS`` (default: the system temporary
    folder) under a key of the interpreter and those entries, so later runs reuse it.
    """
    import fcntl

    entries = sorted((e for d in _site_dirs() for e in d.iterdir() if not _is_fedray(e)), key=lambda e: e.name)
    key = hashlib.sha256(json.dumps([sys.version, sys.executable, [str(e) for e in entries]]).encode()).hexdigest()[:12]
    root = Path(os.environ.get("FEDRAY_TEST_VENVS") or Path(tempfile.gettempdir()) / "fedray-test-venvs")
    target = root / f"worker-{key}"
    python = target / "bin" / "python"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"worker-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the others wait and reuse it
        if (target / ".complete").exists():
            return python
        shutil.rmtree(target, ignore_errors=True)  # a build that was interrupted
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(target)], check=True)
        deps = target / "deps"
        deps.mkdir()
        for entry in entries:
            if entry.name not in ("__pycache__",) and not (deps / entry.name).exists():
                (deps / entry.name).symlink_to(entry)
        own_site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                       check=True, capture_output=True, text=True).stdout.strip())
        own_site.mkdir(parents=True, exist_ok=True)
        (own_site / "fedray_test_worker_deps.pth").write_text(f"import site; site.addsitedir({str(deps)!r})\n")
        ray_script = target / "bin" / "ray"
        ray_script.write_text(f"#!{python}\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n")
        ray_script.chmod(0o755)
        (target / ".complete").write_text("\n".join(str(e) for e in entries))
    return python
