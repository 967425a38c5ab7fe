"""A real faust-streaming app for the end-to-end test: one agent relays a topic into another.

Run as a worker by ``test_services_faust.py`` (``python faust_relay_app.py worker``) and configured
through environment variables, so that every test run uses fresh topics and a fresh consumer group.
The app is built only when run, so importing this module (pytest's doctest collection) needs no setup.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping

import faust


class Impression(faust.Record, serializer="json"):
    """What the test produces."""

    session_id: str
    score: float


class Scored(faust.Record, serializer="json"):
    """What the agent writes: the impression's score, doubled, and which app relayed it."""

    session_id: str
    doubled: float
    relayed_by: str


def build_app(env: Mapping[str, str]) -> faust.App:
    """The relay app: ``RELAY_SOURCE`` -> agent (concurrency 1) -> ``RELAY_SINK`` on ``RELAY_BOOTSTRAP``."""
    app = faust.App(
        env["RELAY_APP_ID"],
        broker=f"kafka://{env['RELAY_BOOTSTRAP']}",
        store="memory://",
        datadir=env["RELAY_DATADIR"],
        web_enabled=False,
        topic_replication_factor=1,
        topic_partitions=1,
        consumer_auto_offset_reset="earliest",
    )
    source = app.topic(env["RELAY_SOURCE"], key_type=str, value_type=Impression)
    sink = app.topic(env["RELAY_SINK"], key_type=str, value_type=Scored)

    @app.agent(source, concurrency=1)
    async def relay(impressions: AsyncIterator[Impression]) -> None:
        async for impression in impressions:
            scored = Scored(
                session_id=impression.session_id, doubled=impression.score * 2, relayed_by=app.conf.id
            )
            await sink.send(key=impression.session_id, value=scored)

    return app


if __name__ == "__main__":
    build_app(os.environ).main()
