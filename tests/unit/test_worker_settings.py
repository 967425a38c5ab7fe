"""The worker's settings: file then environment, errors that name the setting and its source; the outbox
entry format; the documented list of variables matches the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from monitor.core.events import Annotation, Label, decode_event, encode_annotation
from monitor.core.grades import SEED_SCALE
from monitor.worker.processor import Entry, decode_entry, encode_entry
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
    ({"MONITOR_SCALE": "stars"}, "MONITOR_SCALE: "),
    ({"MONITOR_CANARY_ALPHA": "1.5"}, "MONITOR_CANARY_ALPHA: must be a number strictly between 0 and 1"),
    ({"MONITOR_TOPIC_ANNOTATIONS": "impressions"}, "topics must be five different names"),
])
def test_bad_environment_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        load_settings(env)


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
    annotation = Annotation((Label("d1", SEED_SCALE.parse("高")), Label("d2", SEED_SCALE.parse(0))),
                            session_id="s1", from_query=True)
    assert decode_event(encode_annotation(annotation), SEED_SCALE) == annotation
