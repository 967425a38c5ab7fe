"""Time from ``monitor services up`` to all four services ready: cold (empty jar cache) and warm.

- cold: ``$MONITOR_SERVICES_CACHE`` and ``$MONITOR_MAVEN_REPO`` point at empty temporary folders, so
  ``up`` resolves the Kafka jars (and Maven's own plugins) from Maven Central first;
- warm: the same, now filled, cache and a fresh working folder (Kafka storage is formatted again);
- restart: ``up`` again on the working folder of the previous warm run (storage already formatted).

Every run uses free loopback ports and ends with ``down``. The Debian packages are assumed installed
(``deploy/local/install.sh``). Two figures per run: ``up`` as the user waits for it (wall clock of the
command, Python start-up included) and the time ``up`` itself records, which ``monitor services status``
prints afterwards.

    .venv/bin/python benchmarks/services_startup.py [--warm-runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def monitor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``monitor services <args>`` with ``env``; raise with its output if it fails."""
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "services", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"monitor services {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done


def timed_up(env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, seconds recorded by up, whether the Kafka jars were cached) for one ``up``."""
    started = time.monotonic()
    monitor(env, "up", "--free-ports")
    wall = time.monotonic() - started
    last_up = json.loads(monitor(env, "status", "--json").stdout)["last_up"]
    return wall, float(last_up["seconds_to_all_ready"]), str(last_up["kafka_jars"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-runs", type=int, default=3)
    args = parser.parse_args()
    rows: list[tuple[str, float, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="services-bench-") as scratch:
        root = Path(scratch)
        base = {
            **os.environ,
            "MONITOR_SERVICES_CACHE": str(root / "cache"),
            "MONITOR_MAVEN_REPO": str(root / "m2"),
        }
        for index in range(1 + args.warm_runs):
            env = {**base, "MONITOR_SERVICES_DIR": str(root / f"run-{index}")}
            try:
                wall, recorded, jars = timed_up(env)
            finally:
                monitor(env, "down")
            rows.append(("cold" if index == 0 else "warm", wall, recorded, jars))
        try:
            wall, recorded, jars = timed_up(env)
        finally:
            monitor(env, "down")
        rows.append(("restart", wall, recorded, jars))

    print(f"{'run':<8} {'up, wall s':>10} {'recorded s':>10}  kafka jars")
    for name, wall, recorded, jars in rows:
        print(f"{name:<8} {wall:>10.1f} {recorded:>10.1f}  {jars}")
    warm = [wall for name, wall, _, _ in rows if name == "warm"]
    median = statistics.median(warm)
    print(f"cold {rows[0][1]:.1f} s, warm median {median:.1f} s (wall clock, {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
