"""Getting what the local servers need onto the machine: Debian packages and the Kafka jars.

Debian packages (``redis-server``, ``prometheus`` with ``promtool``, ``prometheus-alertmanager``, and
``maven`` / a Java runtime if those are missing) are installed with ``apt-get`` only when a binary is
missing, so a machine that has everything pays nothing. While apt runs, a temporary
``/usr/sbin/policy-rc.d`` that answers 101 keeps the packages from starting their system services, which
would otherwise take the default ports 6379, 9090 and 9093 (the local servers never use those anyway).

The Kafka jars are resolved from Maven Central by ``mvn dependency:copy-dependencies`` on
``deploy/local/kafka/pom.xml`` into ``<cache>/kafka-<version>/libs``, where ``<cache>`` is
``$MONITOR_SERVICES_CACHE`` or ``~/.cache/search-relevance-monitor``. A ``complete`` file listing the
jars is written last, so an interrupted download is never taken for a cached one; a lock file keeps two
processes from resolving at once. ``$MONITOR_MAVEN_REPO``, if set, replaces Maven's local repository
(the cold-start benchmark points both at empty folders).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from monitor.services.process import ServiceError

Echo = Callable[[str], None]

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_POM = REPO_ROOT / "deploy" / "local" / "kafka" / "pom.xml"

#: The Debian package that provides each binary the local servers need.
PACKAGE_OF: dict[str, str] = {
    "java": "default-jre-headless",
    "mvn": "maven",
    "redis-server": "redis-server",
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "amtool": "prometheus-alertmanager",
    "openssl": "openssl",  # the throwaway CA and certificates of the secured servers (tls.py)
    "chromium": "chromium",  # headless: the screenshot of Label Studio's labelling page (docs/annotate.md)
    "fc-list": "fontconfig",  # which fonts cover Chinese, for that screenshot
}

#: The binaries each server needs.
BINARIES_OF: dict[str, tuple[str, ...]] = {
    "kafka": ("java",),  # and mvn, but only when the jars are not cached yet (ensure_kafka_jars)
    "redis": ("redis-server",),
    "prometheus": ("prometheus", "promtool"),
    "alertmanager": ("prometheus-alertmanager", "amtool"),
    "label-studio": (),  # a Python virtualenv of its own: label_studio.ensure_label_studio
    "redis-cluster": ("redis-server",),
    "kafka-cluster": ("java",),
}

_POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


def _quiet(_: str) -> None:
    """An :data:`Echo` that says nothing."""


def find_binary(name: str) -> str | None:
    """The path of an executable on PATH or in the system bin folders, or None."""
    found = shutil.which(name)
    if found:
        return found
    for folder in ("/usr/bin", "/usr/sbin", "/usr/local/bin"):
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def require_binary(name: str) -> str:
    """The path of ``name``, or a :class:`ServiceError` that says how to install it."""
    path = find_binary(name)
    if path is None:
        package = PACKAGE_OF.get(name, name)
        raise ServiceError(
            f"{name} is not installed; run deploy/local/install.sh or `apt-get install {package}`"
        )
    return path


def missing_packages(binaries: Iterable[str]) -> list[str]:
    """The Debian packages to install so that every binary in ``binaries`` exists (sorted, unique)."""
    return sorted({PACKAGE_OF[name] for name in binaries if find_binary(name) is None})


def _privilege_prefix() -> list[str]:
    if os.geteuid() == 0:
        return []
    sudo = find_binary("sudo")
    if sudo and subprocess.run([sudo, "-n", "true"], capture_output=True, check=False).returncode == 0:
        return [sudo, "-n"]
    raise ServiceError("installing Debian packages needs root or password-less sudo")


def _run(argv: list[str], what: str, timeout: float = 600.0) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ServiceError(f"{what} failed: {error}") from error
    if done.returncode != 0:
        output = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise ServiceError(f"{what} failed (exit status {done.returncode}):\n{output}")


@contextlib.contextmanager
def _system_services_held_back(prefix: list[str]) -> Iterator[None]:
    """Keep packages from starting their services while apt runs (unless a policy is already set)."""
    if _POLICY_RC_D.exists():
        yield
        return
    script = f"printf '#!/bin/sh\\nexit 101\\n' > {_POLICY_RC_D} && chmod 755 {_POLICY_RC_D}"
    _run([*prefix, "sh", "-c", script], f"writing {_POLICY_RC_D}")
    try:
        yield
    finally:
        _run([*prefix, "rm", "-f", str(_POLICY_RC_D)], f"removing {_POLICY_RC_D}")


def install_packages(packages: list[str], echo: Echo = _quiet) -> None:
    """``apt-get update`` then ``apt-get install -y --no-install-recommends`` the packages."""
    if not packages:
        return
    if find_binary("apt-get") is None:
        raise ServiceError(f"cannot install {', '.join(packages)}: apt-get not found (not Debian?)")
    prefix = _privilege_prefix()
    apt = [*prefix, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-q", "-y"]
    echo(f"installing Debian packages: {' '.join(packages)}")
    with _system_services_held_back(prefix):
        _run([*apt, "update"], "apt-get update")
        _run([*apt, "install", "--no-install-recommends", *packages], "apt-get install " + " ".join(packages))


def ensure_binaries(binaries: Iterable[str], echo: Echo = _quiet) -> None:
    """Install the packages of whichever ``binaries`` are missing; do nothing if none is."""
    wanted = list(binaries)
    install_packages(missing_packages(wanted), echo)
    for name in wanted:
        require_binary(name)


def cache_root() -> Path:
    """``$MONITOR_SERVICES_CACHE`` or ``~/.cache/search-relevance-monitor``."""
    configured = os.environ.get("MONITOR_SERVICES_CACHE")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "search-relevance-monitor"


def kafka_libs(version: str) -> Path:
    """The folder of the cached jars of Kafka ``version``."""
    return cache_root() / f"kafka-{version}" / "libs"


def kafka_jars_cached(version: str) -> bool:
    """True if every jar recorded by a finished resolution of ``version`` is in the cache."""
    libs = kafka_libs(version)
    marker = libs.parent / "complete"
    if not marker.is_file():
        return False
    names = [line for line in marker.read_text().splitlines() if line]
    return bool(names) and all((libs / name).is_file() for name in names)


def ensure_kafka_jars(version: str, echo: Echo = _quiet) -> bool:
    """Make sure the jars of Kafka ``version`` are cached; return True if they had to be downloaded."""
    if kafka_jars_cached(version):
        return False
    home = kafka_libs(version).parent
    home.mkdir(parents=True, exist_ok=True)
    with (home.parent / f"kafka-{version}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if kafka_jars_cached(version):
            return False
        _resolve_kafka_jars(version, home, echo)
    return True


def _resolve_kafka_jars(version: str, home: Path, echo: Echo) -> None:
    if not KAFKA_POM.is_file():
        raise ServiceError(f"{KAFKA_POM} not found; run from a clone of the repository")
    ensure_binaries(["mvn", "java"], echo)
    staging = home / f"libs.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    argv = [
        require_binary("mvn"), "-q", "-B", "-f", str(KAFKA_POM), f"-Dkafka.version={version}",
        "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
    ]  # fmt: skip
    repo = os.environ.get("MONITOR_MAVEN_REPO")
    if repo:
        argv.append(f"-Dmaven.repo.local={Path(repo).expanduser()}")
    echo(f"resolving Kafka {version} jars from Maven Central into {home / 'libs'}")
    _run(argv, f"mvn dependency:copy-dependencies (Kafka {version})")
    jars = sorted(path.name for path in staging.glob("*.jar"))
    if not any(name.startswith(f"kafka_2.13-{version}") for name in jars):
        raise ServiceError(f"mvn finished but {staging} holds no kafka_2.13-{version} jar")
    libs = home / "libs"
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    (home / "complete").write_text("\n".join(jars) + "\n")
