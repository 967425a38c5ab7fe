"""``monitor worker --processes N``: N worker processes in one consumer group, from one command.

A worker is one Python process, and its CPU is the limit (docs/scaling.md): on a host with cores to spare,
run one per core. This starts N children (``python -m monitor worker`` with the same settings), each with
its own HTTP port (``MONITOR_HTTP_PORT`` + i; with port 0 each picks a free one) and, under static group
membership, its own instance id (``MONITOR_GROUP_INSTANCE_ID``-i). They share the consumer group, so Kafka
divides the partitions among them, and Redis, so every one of them exports the same relevance series.
SIGTERM and SIGINT are passed on; when one child exits, the others are stopped and the command exits
with its status, for the orchestrator to restart the whole (no child is restarted here).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import FrameType

log = logging.getLogger("monitor.worker")


def child_env(env: Mapping[str, str], index: int, http_port: int) -> dict[str, str]:
    """The environment of child ``index``: its HTTP port and, with static membership, its instance id.

    >>> child_env({"MONITOR_GROUP_INSTANCE_ID": "pod-3"}, 1, 9464)["MONITOR_GROUP_INSTANCE_ID"]
    'pod-3-1'
    >>> child_env({}, 2, 9464)["MONITOR_HTTP_PORT"], child_env({}, 2, 0)["MONITOR_HTTP_PORT"]
    ('9466', '0')
    """
    out = {**env, "MONITOR_HTTP_PORT": str(http_port + index if http_port else 0)}
    if env.get("MONITOR_GROUP_INSTANCE_ID"):
        out["MONITOR_GROUP_INSTANCE_ID"] = f"{env['MONITOR_GROUP_INSTANCE_ID']}-{index}"
    return out


def run_processes(count: int, args: Sequence[str], env: Mapping[str, str], http_port: int) -> int:
    """Run ``count`` workers (``monitor worker <args>``) until one exits or a signal ends them all; the
    exit status is the first child's to exit (0 after a signal)."""
    children = [subprocess.Popen([sys.executable, "-m", "monitor", "worker", *args],
                                 env=child_env(env, index, http_port)) for index in range(count)]
    log.info("started %d worker processes: pids %s", count, ", ".join(str(c.pid) for c in children))
    stopping: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            done = [c for c in children if c.poll() is not None]
            if done:
                break
            time.sleep(0.2)
        status = 0 if stopping else done[0].returncode
        if not stopping:
            log.error("worker process %d exited with status %s; stopping the others", done[0].pid, status)
        for child in children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + 30.0
        for child in children:
            try:
                child.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        return status
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def pass_on_args(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--processes N`` (or ``--processes=N``): what each child is given."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--processes":
            skip = True
        elif not arg.startswith("--processes="):
            out.append(arg)
    return out
