"""The schema registry on a 3-node cluster: every node serves the registry, writes run on the
node leading ``_schemas`` (the others forward theirs over the mesh), so schemas registered at
the same moment through all three nodes get distinct ids; a node answers a read of its own
write at once; with the leader killed (SIGKILL), writes on the survivors work again under
the new leader and ids go on without reuse."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from replication_cluster import IDS, Cluster, describe_all, wait_for

TOPIC = "_schemas"
_URL_LINE = re.compile(r"schema registry on (http://\S+)")
_JSON = "application/vnd.schemaregistry.v1+json"


def http(url: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """(status, JSON body) of one registry request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"Content-Type": _JSON, "Accept": _JSON})
    try:
        with urllib.request.urlopen(request, timeout=40) as answer:
            return int(answer.status), json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return int(exc.code), json.loads(raw) if raw else None


def avro(name: str) -> dict[str, str]:
    return {"schema": json.dumps({"type": "record", "name": name,
                                  "fields": [{"name": "f", "type": "string"}]})}


def register(url: str, subject: str, name: str) -> tuple[int, Any]:
    return http(url, "POST", f"/subjects/{subject}/versions", avro(name))


def register_retrying(url: str, subject: str, name: str, timeout: float) -> int:
    """A write retried while no leader is known (50004) or the old one is still named
    (50003), as a client does during a failover (the test waits for a new leader first, so
    these are rare)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = register(url, subject, name)
        if status == 200:
            return int(body["id"])
        # 50002: a store timeout, should the node's Kafka client still ask the dead leader
        assert body["error_code"] in (50002, 50003, 50004), (status, body)
        assert time.monotonic() < deadline, f"{subject} not registered: {body}"
        time.sleep(0.3)


def serves(url: str, schema_id: int) -> bool:
    return http(url, "GET", f"/schemas/ids/{schema_id}")[0] == 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, dict[int, str]]]:
    c = Cluster(Path(tmp_path_factory.mktemp("registry-cluster")))
    for node in c.nodes.values():  # each node's registry on its own address
        node.extra_args += ["--set", f"registry.listener={node.host}:0"]
    try:
        c.start()
        urls: dict[int, str] = {}

        def found() -> bool:
            for i, node in c.nodes.items():
                match = _URL_LINE.search(node.logs())
                if match:
                    urls[i] = match.group(1)
            return len(urls) == len(IDS)

        wait_for(found, 20, "every node's registry URL in its log")
        wait_for(lambda: all(http(u, "GET", "/subjects")[0] == 200 for u in urls.values()),
                 40, "every registry has read _schemas")
        wait_for(lambda: c.settled(TOPIC, 1), 30, "_schemas replicated on all three",
                 detail=lambda: describe_all(c, TOPIC))
        yield c, urls
    finally:
        c.stop()


def test_concurrent_writes_through_every_node_get_distinct_ids(
        cluster: tuple[Cluster, dict[int, str]]) -> None:
    _, urls = cluster
    ids: dict[str, int] = {}
    errors: list[str] = []
    start = threading.Barrier(len(urls))

    def writer(node: int, url: str) -> None:
        start.wait()
        for k in range(6):
            subject = f"concurrent-n{node}-{k}"
            status, body = register(url, subject, f"N{node}K{k}")
            if status == 200:
                ids[subject] = int(body["id"])
            else:
                errors.append(f"{subject}: {status} {body}")

    threads = [threading.Thread(target=writer, args=item) for item in urls.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(ids) == 18 and len(set(ids.values())) == 18, ids
    for url in urls.values():  # every node serves every schema, soon
        wait_for(lambda url=url: all(serves(url, i) for i in ids.values()), 10,  # type: ignore[misc]
                 f"{url} serves every id")
        for subject, schema_id in ids.items():
            status, body = http(url, "GET", f"/subjects/{subject}/versions/1")
            assert status == 200 and body["id"] == schema_id


def test_a_follower_reads_its_own_write_at_once(
        cluster: tuple[Cluster, dict[int, str]]) -> None:
    c, urls = cluster
    leader = c.leader(TOPIC, 0)
    assert leader in IDS
    for node in (i for i in IDS if i != leader):
        url = urls[node]
        for k in range(3):
            subject = f"ryw-n{node}-{k}"
            status, body = register(url, subject, f"Ryw{node}x{k}")
            assert status == 200, body
            # GET /subjects answers from the node's state as it is (no sync on a miss)
            status, subjects = http(url, "GET", "/subjects")
            assert status == 200 and subject in subjects
            status, latest = http(url, "GET", f"/subjects/{subject}/versions/latest")
            assert status == 200 and latest["id"] == body["id"]
        # a refusal from the leader comes back as Confluent's error, unchanged
        status, body = http(url, "DELETE", f"/subjects/no-such-{node}")
        assert (status, body["error_code"]) == (404, 40401)


def test_writes_go_on_after_the_leader_is_killed(
        cluster: tuple[Cluster, dict[int, str]]) -> None:
    c, urls = cluster
    for node, url in urls.items():  # ids the new leader must not hand out again
        assert register(url, f"before-n{node}", f"Before{node}")[0] == 200
    status, listed = http(urls[IDS[0]], "GET", "/schemas?deleted=true")
    assert status == 200
    highest = max(int(s["id"]) for s in listed)
    leader = c.leader(TOPIC, 0)
    assert leader in IDS
    c.nodes[leader].kill()
    survivors = [i for i in IDS if i != leader]
    wait_for(lambda: c.leader(TOPIC, 0, c.nodes[survivors[0]]) in survivors, 30,
             "a survivor leads _schemas")
    new_ids: list[int] = []
    for round_ in range(2):
        for node in survivors:
            new_ids.append(register_retrying(urls[node], f"after-n{node}-{round_}",
                                             f"After{node}x{round_}", 20))
    assert len(set(new_ids)) == len(new_ids) and min(new_ids) > highest, (highest, new_ids)
    for node in survivors:
        wait_for(lambda node=node: all(serves(urls[node], i) for i in new_ids), 10,  # type: ignore[misc]
                 f"node {node} serves the new ids")
