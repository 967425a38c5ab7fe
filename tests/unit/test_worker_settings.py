"""The worker's settings: file then environment, errors that name the setting and its source; the security
settings (Kafka SASL/TLS, Redis password/TLS), whose secrets no message or description shows; the outbox
entry format; the documented list of variables matches the code."""

from __future__ import annotations

import io
import json
import logging
import re
import ssl
import subprocess
import sys
from pathlib import Path

import faust
import pytest
from mode.utils.logging import ExtensionFormatter

from monitor.core.decoding import decode_event
from monitor.core.events import Annotation, Label, encode_annotation
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.services.tls import TlsFiles
from monitor.worker.outbox import Entry, decode_entry, encode_entry
from monitor.worker.security import HideSaslPayloads, KafkaSecurity
from monitor.worker.settings import ENV, SettingsError, describe, load_settings

DOCS = Path(__file__).resolve().parents[2] / "docs" / "worker.md"


def test_defaults_then_file_then_environment(tmp_path: Path) -> None:
    assert load_settings({}).http_port == 9464
    config = tmp_path / "monitor.toml"
    config.write_text('http_port = 9500\npartitions = 8\n[topics]\nimpressions = "imp"\n'
                      '[stream]\njoin_window = 600\nk = { head = 30, torso = 10, tail = 10 }\n')
    from_file = load_settings({}, config)
    assert (from_file.http_port, from_file.partitions, from_file.topics.impressions) == (9500, 8, "imp")
    assert from_file.stream.join_window == 600 and from_file.stream.k["head"] == 30
    both = load_settings({"MONITOR_HTTP_PORT": "9600", "MONITOR_CONFIG": str(config)})
    assert both.http_port == 9600 and both.partitions == 8


@pytest.mark.parametrize(("env", "message"), [
    ({"MONITOR_HTTP_PORT": "http"}, "MONITOR_HTTP_PORT: must be an integer in 0..65535, got 'http'"),
    ({"MONITOR_PARTITIONS": "0"}, "MONITOR_PARTITIONS: must be an integer in 1..10000, got '0'"),
    ({"MONITOR_KAFKA_BOOTSTRAP": "kafka"}, "MONITOR_KAFKA_BOOTSTRAP: expected host:port"),
    ({"MONITOR_REDIS_URL": "http://x"}, "MONITOR_REDIS_URL: expected a redis://"),
    ({"MONITOR_REDIS_URL": "redis+cluster://a:1,b/0"}, "MONITOR_REDIS_URL: a Redis Cluster URL lists its nodes"),
    ({"MONITOR_REDIS_URL": "redis+cluster://a:1/2"}, "MONITOR_REDIS_URL: a Redis Cluster has only database 0"),
    ({"MONITOR_SCALE": "stars"}, "MONITOR_SCALE: "),
    ({"MONITOR_CANARY_ALPHA": "1.5"}, "MONITOR_CANARY_ALPHA: must be a number strictly between 0 and 1"),
    ({"MONITOR_CANARY_BASELINE_WINDOW": "0"}, "MONITOR_CANARY_BASELINE_WINDOW: must be a positive number of"),
    ({"MONITOR_CANARY_STICKY": "maybe"}, "MONITOR_CANARY_STICKY: must be true or false, got 'maybe'"),
    ({"MONITOR_CANARY_MATCH_SLOT": "-1"}, "MONITOR_CANARY_MATCH_SLOT: must be a positive number of"),
    ({"MONITOR_CANARY_MATCH_PERIOD": "60"}, "canary settings: match_period: must be at least match_slot"),
    ({"MONITOR_TOPIC_ANNOTATIONS": "impressions"}, "topics must be five different names"),
])
def test_bad_environment_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        load_settings(env)


def test_the_canary_settings_reach_the_canary_test() -> None:
    config = load_settings({"MONITOR_CANARY_BASELINE_WINDOW": "7200", "MONITOR_CANARY_MIN_DROP": "0.05"}).canary()
    assert (config.baseline_window, config.min_relative_drop, config.alpha) == (7200.0, 0.05, 0.05)
    assert (config.time_matched, config.sticky, config.match_slot, config.match_period) == (True, True, 3600.0,
                                                                                          86400.0)
    weekly = load_settings({"MONITOR_CANARY_TIME_MATCHED": "false", "MONITOR_CANARY_STICKY": "0",
                            "MONITOR_CANARY_MATCH_PERIOD": "604800"}).canary()
    assert (weekly.time_matched, weekly.sticky, weekly.match_period) == (False, False, 604800.0)


def test_bad_file_values_name_the_file(tmp_path: Path) -> None:
    config = tmp_path / "monitor.toml"
    config.write_text("htp_port = 1\n")
    with pytest.raises(SettingsError, match=rf"{re.escape(str(config))}: unknown setting 'htp_port'"):
        load_settings({}, config)
    config.write_text("[stream]\njoin_window = -5\n")
    with pytest.raises(SettingsError, match=r"\[stream\] join_window must be a positive number of seconds, got -5"):
        load_settings({}, config)
    config.write_text("http_port = \n")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings({}, config)
    with pytest.raises(SettingsError, match="cannot read the config file"):
        load_settings({}, tmp_path / "missing.toml")


def test_secrets_are_hidden() -> None:
    settings = load_settings({"MONITOR_REDIS_URL": "redis://user:s3cret@127.0.0.1:6379/0",
                              "MONITOR_DEPLOY_TOKEN": "t0ken"})
    shown = str(describe(settings)) + repr(settings)
    assert "s3cret" not in shown and "t0ken" not in shown and "***" in shown
    with pytest.raises(SettingsError) as error:
        load_settings({"MONITOR_REDIS_URL": "http://user:s3cret@host/0"})
    assert "s3cret" not in str(error.value)


def test_every_variable_is_documented() -> None:
    documented = set(re.findall(r"`(MONITOR_[A-Z_]+)`", DOCS.read_text()))
    assert {name for name, _ in ENV.values()} <= documented


def test_outbox_entries_keep_bytes_and_fan_outs_decode_back() -> None:
    entry = Entry("dlq", b"\xff\x00key", b"\xfe not json", (("monitor.error.code", b"invalid_json"),))
    assert decode_entry(encode_entry(entry)) == entry
    annotation = Annotation((Label("d1", FOUR_LEVEL_SCALE.parse("高")), Label("d2", FOUR_LEVEL_SCALE.parse(0))),
                            session_id="s1", from_query=True)
    assert decode_event(encode_annotation(annotation), FOUR_LEVEL_SCALE) == annotation


# --- security: Kafka SASL/TLS, Redis ACL user/TLS (docs/worker.md, "Security") ---

KAFKA_PASSWORD = "k-s3cret-pw"
REDIS_PASSWORD = "r-s3cret-pw"


TLS_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tls"


@pytest.fixture(scope="module")
def tls() -> TlsFiles:
    """A throwaway CA with server and client certificates, as ``monitor.services.tls.make_tls_files`` makes
    them, committed in ``tests/fixtures/tls`` (valid until 2126, and the settings only load them): the fast
    loop needs no ``openssl`` binary. ``encrypted.key`` is ``client.key`` encrypted with the passphrase x."""
    return TlsFiles(TLS_FIXTURES)


def secure_env(tls: TlsFiles, tmp_path: Path) -> dict[str, str]:
    kafka_password, redis_password = tmp_path / "kafka-password", tmp_path / "redis-password"
    kafka_password.write_text(KAFKA_PASSWORD + "\n")
    redis_password.write_text(REDIS_PASSWORD + "\r\n")
    return {"MONITOR_KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "MONITOR_KAFKA_SASL_MECHANISM": "scram-sha-256",
            "MONITOR_KAFKA_SASL_USERNAME": "monitor", "MONITOR_KAFKA_SASL_PASSWORD_FILE": str(kafka_password),
            "MONITOR_KAFKA_SSL_CAFILE": str(tls.ca), "MONITOR_REDIS_URL": "rediss://monitor@redis:6380/0",
            "MONITOR_REDIS_PASSWORD_FILE": str(redis_password), "MONITOR_REDIS_SSL_CAFILE": str(tls.ca),
            "MONITOR_REDIS_SSL_CERTFILE": str(tls.client_cert), "MONITOR_REDIS_SSL_KEYFILE": str(tls.client_key)}


def test_plaintext_by_default() -> None:
    settings = load_settings({})
    kafka = settings.kafka_security()
    assert kafka.aiokafka_options() == {"security_protocol": "PLAINTEXT"}
    assert kafka.faust_credentials() is None and kafka.ssl_context() is None
    assert settings.redis_options() == {}


def test_sasl_ssl_and_rediss_from_the_environment(tls: TlsFiles, tmp_path: Path) -> None:
    settings = load_settings(secure_env(tls, tmp_path))
    kafka = settings.kafka_security()
    assert (kafka.protocol, kafka.sasl_mechanism, kafka.sasl_username) == ("SASL_SSL", "SCRAM-SHA-256", "monitor")
    assert kafka.sasl_password == KAFKA_PASSWORD  # the file's final newline is not part of it
    options = kafka.aiokafka_options()
    assert {k: v for k, v in options.items() if k != "ssl_context"} == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "monitor",
        "sasl_plain_password": KAFKA_PASSWORD}
    context = options["ssl_context"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.get_ca_certs()[0]["subject"] == ((("commonName", "monitor local test CA"),),)
    credentials = kafka.faust_credentials()
    assert isinstance(credentials, faust.SASLCredentials)
    assert (credentials.protocol.value, credentials.mechanism.value) == ("SASL_SSL", "SCRAM-SHA-256")
    assert credentials.password == KAFKA_PASSWORD and credentials.ssl_context is not None
    assert settings.redis_options() == {"password": REDIS_PASSWORD, "ssl_ca_certs": str(tls.ca),
                                        "ssl_certfile": str(tls.client_cert), "ssl_keyfile": str(tls.client_key)}


def test_tls_only_with_a_client_certificate(tls: TlsFiles) -> None:
    kafka = load_settings({"MONITOR_KAFKA_SECURITY_PROTOCOL": "SSL", "MONITOR_KAFKA_SSL_CAFILE": str(tls.ca),
                           "MONITOR_KAFKA_SSL_CERTFILE": str(tls.client_cert),
                           "MONITOR_KAFKA_SSL_KEYFILE": str(tls.client_key)}).kafka_security()
    options = kafka.aiokafka_options()
    assert set(options) == {"security_protocol", "ssl_context"} and options["security_protocol"] == "SSL"
    credentials = kafka.faust_credentials()
    assert isinstance(credentials, faust.SSLCredentials) and credentials.protocol.value == "SSL"
    # SASL over plaintext: no TLS context at all
    plain = load_settings({"MONITOR_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "MONITOR_KAFKA_SASL_MECHANISM": "PLAIN",
                           "MONITOR_KAFKA_SASL_USERNAME": "u", "MONITOR_KAFKA_SASL_PASSWORD": "p"}).kafka_security()
    assert "ssl_context" not in plain.aiokafka_options()
    assert plain.faust_credentials().protocol.value == "SASL_PLAINTEXT"


def test_security_from_the_file_and_the_environment_over_it(tls: TlsFiles, tmp_path: Path) -> None:
    secret = tmp_path / "kafka-password"
    secret.write_text("from-file")
    config = tmp_path / "monitor.toml"
    config.write_text(f'kafka_security_protocol = "SASL_SSL"\nkafka_sasl_username = "monitor"\n'
                      f'kafka_sasl_password_file = "{secret}"\nkafka_ssl_cafile = "{tls.ca}"\n'
                      f'redis_url = "rediss://monitor@redis:6380/0"\nredis_password = "r"\n'
                      f'redis_ssl_cafile = "{tls.ca}"\n')
    from_file = load_settings({}, config)
    assert from_file.kafka_sasl_password == "from-file" and from_file.kafka_ssl_cafile == str(tls.ca)
    assert from_file.kafka_sasl_mechanism == "SCRAM-SHA-512" and from_file.redis_options()["password"] == "r"
    overridden = load_settings({"MONITOR_KAFKA_SASL_PASSWORD": "from-env"}, config)
    assert overridden.kafka_sasl_password == "from-env"  # the environment wins over either spelling


@pytest.mark.parametrize(("env", "message"), [
    ({"MONITOR_KAFKA_SECURITY_PROTOCOL": "TLS"},
     "MONITOR_KAFKA_SECURITY_PROTOCOL: must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, got 'TLS'"),
    ({"MONITOR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "MONITOR_KAFKA_SASL_MECHANISM": "GSSAPI"},
     "MONITOR_KAFKA_SASL_MECHANISM: must be one of SCRAM-SHA-512, SCRAM-SHA-256, PLAIN, got 'GSSAPI'"),
    ({"MONITOR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "MONITOR_KAFKA_SASL_PASSWORD": KAFKA_PASSWORD},
     "MONITOR_KAFKA_SECURITY_PROTOCOL is SASL_SSL: set MONITOR_KAFKA_SASL_USERNAME and MONITOR_KAFKA_SASL_PASSWORD"),
    ({"MONITOR_KAFKA_SASL_USERNAME": "monitor", "MONITOR_KAFKA_SASL_PASSWORD": KAFKA_PASSWORD},
     "MONITOR_KAFKA_SASL_USERNAME/PASSWORD are set but MONITOR_KAFKA_SECURITY_PROTOCOL is PLAINTEXT"),
    ({"MONITOR_KAFKA_SASL_PASSWORD": KAFKA_PASSWORD, "MONITOR_KAFKA_SASL_PASSWORD_FILE": "{ca}"},
     "environment: give MONITOR_KAFKA_SASL_PASSWORD or MONITOR_KAFKA_SASL_PASSWORD_FILE, not both"),
    ({"MONITOR_KAFKA_SASL_PASSWORD_FILE": "{tmp}/missing"}, "MONITOR_KAFKA_SASL_PASSWORD_FILE: cannot read"),
    ({"MONITOR_REDIS_PASSWORD_FILE": "{tmp}/empty"}, "MONITOR_REDIS_PASSWORD_FILE: '{tmp}/empty' is empty"),
    ({"MONITOR_KAFKA_SSL_CAFILE": "{tmp}/missing.pem"}, "MONITOR_KAFKA_SSL_CAFILE: no such file"),
    ({"MONITOR_KAFKA_SSL_CAFILE": "{ca}"}, "MONITOR_KAFKA_SSL_* files are set but MONITOR_KAFKA_SECURITY_PROTOCOL is PLAINTEXT"),
    ({"MONITOR_KAFKA_SECURITY_PROTOCOL": "SSL", "MONITOR_KAFKA_SSL_CAFILE": "{tmp}/empty"},
     "MONITOR_KAFKA_SSL_CAFILE: not a usable CA certificate file"),
    ({"MONITOR_KAFKA_SECURITY_PROTOCOL": "SSL", "MONITOR_KAFKA_SSL_KEYFILE": "{client_key}"},
     "MONITOR_KAFKA_SSL_KEYFILE: needs MONITOR_KAFKA_SSL_CERTFILE"),
    ({"MONITOR_KAFKA_SECURITY_PROTOCOL": "SSL", "MONITOR_KAFKA_SSL_CERTFILE": "{client_cert}",
      "MONITOR_KAFKA_SSL_KEYFILE": "{server_key}"},
     "MONITOR_KAFKA_SSL_CERTFILE/MONITOR_KAFKA_SSL_KEYFILE: not a usable certificate and key"),
    ({"MONITOR_KAFKA_SECURITY_PROTOCOL": "SSL", "MONITOR_KAFKA_SSL_CERTFILE": "{client_cert}",
      "MONITOR_KAFKA_SSL_KEYFILE": "{encrypted_key}"}, "the key file is encrypted"),
    ({"MONITOR_REDIS_SSL_CAFILE": "{ca}"}, "MONITOR_REDIS_SSL_* files are set but MONITOR_REDIS_URL is not rediss://"),
    ({"MONITOR_REDIS_URL": f"rediss://monitor:{REDIS_PASSWORD}@redis:6380/0", "MONITOR_REDIS_PASSWORD": "other"},
     "MONITOR_REDIS_PASSWORD: MONITOR_REDIS_URL holds a password already"),
])
def test_bad_security_settings_are_named_without_their_secrets(env: dict[str, str], message: str, tls: TlsFiles,
                                                               tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("")
    paths = {"ca": str(tls.ca), "tmp": str(tmp_path), "client_cert": str(tls.client_cert),
             "client_key": str(tls.client_key), "server_key": str(tls.key)}
    paths["encrypted_key"] = str(tls.folder / "encrypted.key")
    with pytest.raises(SettingsError) as error:
        load_settings({k: v.format(**paths) for k, v in env.items()})
    assert message.format(**paths) in str(error.value)
    assert KAFKA_PASSWORD not in str(error.value) and REDIS_PASSWORD not in str(error.value)


def test_a_file_giving_a_secret_twice_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "monitor.toml"
    config.write_text(f'redis_password = "{REDIS_PASSWORD}"\nredis_password_file = "/run/secret"\n')
    with pytest.raises(SettingsError, match=rf"{re.escape(str(config))}: give redis_password or redis_password_file, "
                                            "not both"):
        load_settings({}, config)


def test_a_redis_cluster_url_with_tls_and_a_password_outside_it(tls: TlsFiles) -> None:
    url = "rediss+cluster://monitor@10.0.0.1:6380,10.0.0.2:6380/0"
    settings = load_settings({"MONITOR_REDIS_URL": url, "MONITOR_REDIS_PASSWORD": REDIS_PASSWORD,
                              "MONITOR_REDIS_SSL_CAFILE": str(tls.ca)})
    assert settings.redis_url == url
    assert settings.redis_options() == {"password": REDIS_PASSWORD, "ssl_ca_certs": str(tls.ca)}
    assert describe(settings)["redis_security"] == {"tls": True, "cluster": True, "username": "monitor",
                                                    "password": "set", "cafile": str(tls.ca), "certfile": None}
    plain = load_settings({"MONITOR_REDIS_URL": f"redis+cluster://monitor:{REDIS_PASSWORD}@10.0.0.1:6379"})
    assert describe(plain)["redis_security"] == {"tls": False, "cluster": True, "username": "monitor",
                                                 "password": "set"}
    assert REDIS_PASSWORD not in json.dumps(describe(plain))


def test_security_secrets_are_hidden(tls: TlsFiles, tmp_path: Path) -> None:
    settings = load_settings(secure_env(tls, tmp_path))
    shown = json.dumps(describe(settings)) + repr(settings) + repr(settings.kafka_security())
    assert KAFKA_PASSWORD not in shown and REDIS_PASSWORD not in shown
    assert describe(settings)["kafka_security"]["sasl_password"] == "set"
    assert describe(settings)["redis_security"] == {"tls": True, "cluster": False, "username": "monitor",
                                                    "password": "set", "cafile": str(tls.ca),
                                                    "certfile": str(tls.client_cert)}
    assert repr(settings.kafka_security().faust_credentials()).count(KAFKA_PASSWORD) == 0


def test_sasl_payloads_are_hidden_from_aiokafka_debug_logs() -> None:
    """aiokafka logs each request at DEBUG; a SASL PLAIN one holds ``\\0user\\0password``."""
    logger = logging.getLogger("aiokafka.conn")
    KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "monitor", KAFKA_PASSWORD).aiokafka_options()
    assert sum(isinstance(f, HideSaslPayloads) for f in logger.filters) == 1
    KafkaSecurity("SASL_PLAINTEXT", "PLAIN", "monitor", KAFKA_PASSWORD).aiokafka_options()
    assert sum(isinstance(f, HideSaslPayloads) for f in logger.filters) == 1  # installed once
    for payload in (f"b'monitor\\x00monitor\\x00{KAFKA_PASSWORD}'", f'b"it\'s\\x00{KAFKA_PASSWORD}"'):
        record = logging.LogRecord("aiokafka.conn", logging.DEBUG, __file__, 1, "Request 3: %s",
                                   (f"SaslAuthenticateRequest_v1(sasl_auth_bytes={payload}, x=1)",), None)
        assert logger.filters[-1].filter(record)
        assert record.getMessage() == "Request 3: SaslAuthenticateRequest_v1(sasl_auth_bytes=<hidden>, x=1)"
        # the worker's log goes through mode's formatter, which formats the arguments again
        line = ExtensionFormatter(io.StringIO(), fmt="%(message)s").format(record)
        assert line == "Request 3: SaslAuthenticateRequest_v1(sasl_auth_bytes=<hidden>, x=1)"


@pytest.mark.parametrize("config", [
    StreamConfig(),
    StreamConfig(join_window=1800, min_coverage=0.8, budget={"head": 1e9, "torso": 1e9, "tail": 1e9},
                 max_closes_per_step=1_000_000),
    StreamConfig(k={"head": 5, "torso": 4, "tail": 3}, windows={"5m": 300.0, "1d": 86400.0},
                 budget={"head": 1e9, "torso": 1e9, "tail": 240}, budget_unit="judgments",
                 share_session_grades=False, query_history=False, variants=("blue", "green-2"),
                 ranker_pattern=r"ranker-[a-z]+ \"v2\"\\d*", undeclared="dead_letter", max_future=60.5),
])
def test_stream_toml_gives_the_same_stream_settings_back(config: StreamConfig, tmp_path: Path) -> None:
    """The tests' settings files are written from the StreamConfig their in-process reference runs with,
    so the two cannot drift apart: what the worker reads back from the file is that config."""
    path = tmp_path / "settings.toml"
    path.write_text(stream_toml(config))
    assert load_settings({}, path).stream == config
    assert (stream_toml(config) == "[stream]\n") == (config == StreamConfig())


def test_the_event_loop_and_the_groups_are_settings_with_clear_refusals() -> None:
    assert load_settings({}).event_loop == "asyncio"
    assert load_settings({"MONITOR_EVENT_LOOP": "UVLoop"}).event_loop == "uvloop"  # any case, as spelled
    with pytest.raises(SettingsError, match="MONITOR_EVENT_LOOP: must be one of asyncio, uvloop, got 'trio'"):
        load_settings({"MONITOR_EVENT_LOOP": "trio"})
    assert load_settings({}).redis_groups == 4
    assert load_settings({"MONITOR_REDIS_GROUPS": "16"}).redis_groups == 16
    with pytest.raises(SettingsError, match="MONITOR_REDIS_GROUPS"):
        load_settings({"MONITOR_REDIS_GROUPS": "0"})
    assert load_settings({"MONITOR_KAFKA_SASL_MECHANISM": "scram-sha-256"}).kafka_sasl_mechanism == "SCRAM-SHA-256"


def test_the_collector_threshold_is_a_setting_and_tunes_a_fresh_process() -> None:
    assert load_settings({}).gc_threshold == 50_000
    assert load_settings({"MONITOR_GC_THRESHOLD": "0"}).gc_threshold == 0
    with pytest.raises(SettingsError, match="MONITOR_GC_THRESHOLD"):
        load_settings({"MONITOR_GC_THRESHOLD": "-1"})
    # in a process of its own: the test process's collector stays as it is
    script = ("import gc, json, sys; from monitor.worker.cli import tune_gc; before = gc.get_threshold(); "
              "tune_gc(int(sys.argv[1])); print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count()]))")
    for threshold in (50_000, 0):
        done = subprocess.run([sys.executable, "-c", script, str(threshold)], capture_output=True, text=True,
                              check=True)
        before, after, frozen = json.loads(done.stdout)
        if threshold:
            assert after == [threshold, *before[1:]] and frozen > 10_000  # the imports are frozen out
        else:
            assert after == before and frozen == 0


def test_the_worker_does_not_build_debug_records_it_then_drops() -> None:
    # Faust's spinner sets the root logger to DEBUG (and keeps it); the worker runs without one, so a
    # log.debug of aiokafka in the hot path costs a level check, not a record (a process of its own: the
    # test process's logging stays as it is)
    script = ("import json, logging, sys, faust; from faust.worker import Worker; "
              "from monitor.worker.cli import setup_logging, without_spinner; setup_logging('WARNING'); "
              "worker = Worker(faust.App('t', broker='kafka://127.0.0.1:1'), loglevel='WARNING', quiet=True, "
              "redirect_stdouts=False); "
              "without_spinner(worker) if sys.argv[1] == 'worker' else None; worker._setup_logging(); "
              "print(json.dumps([logging.getLogger('aiokafka').isEnabledFor(logging.DEBUG), "
              "logging.getLogger('monitor.worker').isEnabledFor(logging.WARNING)]))")
    found = {}
    for how in ("worker", "faust"):
        done = subprocess.run([sys.executable, "-c", script, how], capture_output=True, text=True, check=True)
        found[how] = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"worker": [False, True], "faust": [True, True]}
