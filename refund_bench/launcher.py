"""Start, watch and stop the pipeline's services as local processes (demo, tests, benchmarks).

On Kubernetes each service is its own Deployment (``deploy/k8s/``); locally they are child
processes of this launcher, each with its own metrics/health port.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent

SERVICES: tuple[str, ...] = (
    "extractor",
    "judge",
    "tally",
    "pricing",
    "settler",
    "payout",
    "recorder",
)
BASE_METRICS_PORT = 9401


@dataclass
class Launched:
    name: str
    process: subprocess.Popen[bytes]
    metrics_port: int

    def ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1).is_success
        except httpx.HTTPError:
            return False


@dataclass
class Launcher:
    """Runs the services with ``env`` added to the environment; logs go to ``log_dir``.

    Like a Kubernetes Deployment, it restarts a service that exits on its own (a crash is how
    a stage hands an unprocessable batch back to Kafka for redelivery); ``restarts`` counts them.
    """

    log_dir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    services: Sequence[str] = SERVICES
    base_port: int = BASE_METRICS_PORT
    replica: int = 0
    """Which replica these processes are: it names their transactional and member ids (a
    second launcher with ``replica=1`` and its own ports runs second replicas)."""
    running: dict[str, Launched] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _watching: threading.Event = field(default_factory=threading.Event)

    def start(self, names: Sequence[str] | None = None) -> None:
        """Start the services (default: all) and the supervisor that restarts crashed ones."""
        with self._lock:
            for name in names or self.services:
                self._spawn(name)
        if not self._watching.is_set():
            self._watching.set()
            threading.Thread(target=self._supervise, daemon=True).start()

    def _supervise(self) -> None:
        while self._watching.is_set():
            with self._lock:
                for name, launched in list(self.running.items()):
                    if launched.process.poll() is not None and self._watching.is_set():
                        self.restarts[name] = self.restarts.get(name, 0) + 1
                        del self.running[name]
                        self._spawn(name)
            time.sleep(0.5)

    def _spawn(self, name: str) -> None:
        if name in self.running and self.running[name].process.poll() is None:
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        port = self.base_port + self.services.index(name)
        env = {
            **os.environ,
            **self.env,
            "METRICS_PORT": str(port),
            "METRICS_HOST": "127.0.0.1",
            "TRANSACTIONAL_ID": f"{name}-local-{self.replica}",
            "GROUP_INSTANCE_ID": f"{name}-local-{self.replica}",
        }
        suffix = f"-{self.replica}" if self.replica else ""
        log = open(self.log_dir / f"{name}{suffix}.log", "ab")  # noqa: SIM115 - owned by the child
        process = subprocess.Popen(  # noqa: S603 - our own modules
            [sys.executable, "-m", f"services.{name}"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.running[name] = Launched(name, process, port)

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Block until every running service answers /readyz; raise naming the laggards."""
        deadline = time.monotonic() + timeout_s
        pending = set(self.running)
        while pending:
            for name in sorted(pending):
                with self._lock:
                    launched = self.running.get(name)
                if launched is not None and launched.ready():
                    pending.discard(name)
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"not ready after {timeout_s}s: {sorted(pending)}")
            if pending:
                time.sleep(0.2)

    def stop(self, names: Sequence[str] | None = None, *, kill: bool = False) -> None:
        """SIGTERM (graceful: the open batch commits) or SIGKILL, then wait for exit.

        Stopping every service also stops the supervisor.
        """
        with self._lock:
            if names is None:
                self._watching.clear()
            targets = [
                self.running.pop(n) for n in (names or list(self.running)) if n in self.running
            ]
        for launched in targets:
            if launched.process.poll() is None:
                launched.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        for launched in targets:
            try:
                launched.process.wait(35)
            except subprocess.TimeoutExpired:
                launched.process.kill()
                launched.process.wait(5)
