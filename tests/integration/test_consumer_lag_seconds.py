"""`eddy_consumer_lag_seconds{group,topic}` of a real `eddy serve`, scraped from /metrics
(issue 17): the age of the oldest record a group has not consumed, i.e. now minus the
timestamp of the record at the group's committed offset; 0 once the group is caught up.

A producer stamps each record with a CreateTime of its own, far in the past, one batch per
record (the broker reads a batch's first timestamp); the group commits an offset below the
end without consuming (a simple commit, as an admin tool's reset does). The records on either
side of the committed one are much older and much newer, so the bounds single it out.
"""

from __future__ import annotations

import re
import time
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.timeout(60)

TOPIC, GROUP = "aged", "lagging"
#: each record's age when produced (seconds); the group commits at COMMITTED
AGES = (600, 400, 120, 30, 5)
COMMITTED = 2


def _scrape(admin: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"{admin}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): float(s.value)
            for family in text_string_to_metric_families(text) for s in family.samples}


def _lag(admin: str) -> tuple[float | None, float | None]:
    """(lag seconds of GROUP on TOPIC, its lag in records on partition 0) as scraped."""
    got = _scrape(admin)
    seconds = got.get(("eddy_consumer_lag_seconds", (("group", GROUP), ("topic", TOPIC))))
    records = got.get(("eddy_consumer_lag_records",
                       (("group", GROUP), ("partition", "0"), ("topic", TOPIC))))
    return seconds, records


def _commit(bootstrap: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False})
    try:
        done = c.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
        assert done is not None and [(t.offset, t.error) for t in done] == [(offset, None)]
    finally:
        c.close()


def test_lag_seconds_is_the_age_of_the_record_at_the_committed_offset(
        eddy_factory: Any) -> None:
    node = eddy_factory("--set", "admin.listener=127.0.0.1:0", "--set", "num.partitions=1")
    found = re.search(r"admin on (http://\S+)", node.logs())
    assert found, f"no admin URL logged:\n{node.logs()}"
    admin = found[1]

    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0})
    now_ms = int(time.time() * 1000)
    for n, age in enumerate(AGES):
        p.produce(TOPIC, value=b"record-%d" % n, partition=0, timestamp=now_ms - age * 1000)
        assert p.flush(15) == 0  # one batch per record

    _commit(node.bootstrap, COMMITTED)
    behind = len(AGES) - COMMITTED
    deadline = time.monotonic() + 15
    seconds, records = _lag(admin)
    while records != behind:  # the scrape after the commit landed
        assert time.monotonic() < deadline, f"lag in records {records}, not {behind}"
        time.sleep(0.1)
        seconds, records = _lag(admin)
    # the record at offset 2 was produced 120 s old (the ones either side: 400 s and 30 s)
    assert seconds is not None and 119 <= seconds < 300, seconds

    _commit(node.bootstrap, len(AGES))  # the end: caught up
    deadline = time.monotonic() + 15
    seconds, records = _lag(admin)
    while records != 0:
        assert time.monotonic() < deadline, f"lag in records {records}, not 0"
        time.sleep(0.1)
        seconds, records = _lag(admin)
    assert seconds == 0
