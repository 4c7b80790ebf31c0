"""One consumer-group member in its own process, driven by tests/integration/test_groups.py.

    python group_member.py '<json spec>'

spec: {"client": "confluent" | "kafka-python" | "aiokafka", "bootstrap": ..., "group": ...,
       "topics": [...], "conf": {client-specific settings}, "commit": "none" | "each"}

Prints one JSON object per line on stdout (flushed at once):

    {"ev": "ready"}                                   consumer created, subscribed
    {"ev": "assign", "parts": [...], "now": [...]}    partitions added; "now" = whole assignment
    {"ev": "revoke", "parts": [...], "now": [...]}    partitions removed ("lost" for lost ones)
    {"ev": "msg", "p": P, "o": OFFSET, "v": "value"}  a record, printed after its offset is
                                                      committed when commit == "each"
    {"ev": "commit_error", "p": P, "o": OFFSET, "err": "..."}
    {"ev": "error", "fatal": bool, "code": int, "name": "...", "str": "..."}
    {"ev": "closed"}                                  after a clean close

A line "close" on stdin (or stdin reaching EOF) closes the consumer cleanly (a LeaveGroup
for dynamic members) and exits 0. SIGKILL is the test's way to make it vanish silently.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import traceback
from typing import Any

_out_lock = threading.Lock()


def emit(ev: str, **kw: Any) -> None:
    line = json.dumps({"ev": ev, **kw})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def watch_stdin() -> threading.Event:
    stop = threading.Event()

    def run() -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        stop.set()

    threading.Thread(target=run, daemon=True).start()
    return stop


# ---- confluent-kafka (librdkafka) ----------------------------------------------------------


def run_confluent(spec: dict[str, Any], stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException

    def on_error(err: KafkaError) -> None:
        emit("error", fatal=err.fatal(), code=err.code(), name=err.name(), str=err.str())

    conf = {
        "bootstrap.servers": spec["bootstrap"],
        "group.id": spec["group"],
        "auto.offset.reset": "earliest",
        "enable.auto.commit": spec.get("commit", "each") != "each",
        "fetch.wait.max.ms": 100,
        "error_cb": on_error,
        **spec.get("conf", {}),
    }
    c = Consumer(conf)
    owned: set[int] = set()
    # the Python binding does not expose rd_kafka_rebalance_protocol(): a cooperative
    # assignor is the only way to the cooperative protocol
    coop = "cooperative" in str(conf.get("partition.assignment.strategy", ""))
    proto = "COOPERATIVE" if coop else "EAGER"

    def is_coop() -> bool:
        return coop

    def on_assign(consumer: Any, parts: list[Any]) -> None:
        got = sorted(tp.partition for tp in parts)
        if is_coop():
            owned.update(got)
        else:
            owned.clear()
            owned.update(got)
        emit("assign", parts=got, now=sorted(owned), proto=proto)

    def on_revoke(consumer: Any, parts: list[Any], kind: str = "revoke") -> None:
        gone = sorted(tp.partition for tp in parts)
        if is_coop():
            owned.difference_update(gone)
        else:
            owned.clear()
        emit(kind, parts=gone, now=sorted(owned), proto=proto)

    def on_lost(consumer: Any, parts: list[Any]) -> None:
        on_revoke(consumer, parts, "lost")

    c.subscribe(spec["topics"], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit("ready")
    commit_each = spec.get("commit", "each") == "each"
    fatal = False
    while not stop.is_set():
        try:
            m = c.poll(0.1)
        except KafkaException as exc:  # a fatal error surfaces here too
            err = exc.args[0]
            emit("error", fatal=err.fatal(), code=err.code(), name=err.name(), str=err.str())
            fatal = fatal or err.fatal()
            if fatal:
                break
            continue
        if m is None:
            continue
        if m.error():
            err = m.error()
            emit("error", fatal=err.fatal(), code=err.code(), name=err.name(), str=err.str())
            if err.fatal():
                fatal = True
                break
            continue
        if commit_each:
            try:
                c.commit(message=m, asynchronous=False)
            except KafkaException as exc:
                emit("commit_error", p=m.partition(), o=m.offset(), err=str(exc.args[0]))
        emit("msg", p=m.partition(), o=m.offset(), v=(m.value() or b"").decode())
    if fatal:  # a fenced consumer: wait for the test to say close, then close
        stop.wait(60)
    c.close()
    emit("closed")


# ---- kafka-python ----------------------------------------------------------------------------


def run_kafka_python(spec: dict[str, Any], stop: threading.Event) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata
    from kafka.consumer.subscription_state import ConsumerRebalanceListener

    owned: set[int] = set()

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            owned.clear()
            emit("revoke", parts=sorted(tp.partition for tp in revoked), now=[])

        def on_partitions_assigned(self, assigned: Any) -> None:
            owned.clear()
            owned.update(tp.partition for tp in assigned)
            emit("assign", parts=sorted(owned), now=sorted(owned))

    conf = {
        "bootstrap_servers": spec["bootstrap"],
        "group_id": spec["group"],
        "auto_offset_reset": "earliest",
        "enable_auto_commit": spec.get("commit", "each") != "each",
        "fetch_max_wait_ms": 100,
        **spec.get("conf", {}),
    }
    c = KafkaConsumer(**conf)
    c.subscribe(spec["topics"], listener=Listener())
    emit("ready")
    commit_each = spec.get("commit", "each") == "each"
    # kafka-python 3.0.12: when poll()'s timeout expires while the leader's JoinGroup is in
    # flight and that rejoin was caused by a metadata change, a later poll() can find
    # need_rejoin() false and never finish the join (no heartbeats, so the member is evicted
    # at its session timeout). A poll timeout longer than a rebalance takes avoids the race.
    while not stop.is_set():
        batches = c.poll(timeout_ms=1000)
        for tp, records in batches.items():
            for r in records:
                if commit_each:
                    try:
                        c.commit({tp: OffsetAndMetadata(r.offset + 1, "", -1)})
                    except Exception as exc:
                        emit("commit_error", p=r.partition, o=r.offset, err=repr(exc))
                emit("msg", p=r.partition, o=r.offset, v=(r.value or b"").decode())
    c.close(autocommit=False)
    emit("closed")


# ---- aiokafka --------------------------------------------------------------------------------


def run_aiokafka(spec: dict[str, Any], stop: threading.Event) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    owned: set[int] = set()

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            owned.clear()
            emit("revoke", parts=sorted(tp.partition for tp in revoked), now=[])

        async def on_partitions_assigned(self, assigned: Any) -> None:
            owned.clear()
            owned.update(tp.partition for tp in assigned)
            emit("assign", parts=sorted(owned), now=sorted(owned))

    async def main() -> None:
        conf = {
            "bootstrap_servers": spec["bootstrap"],
            "group_id": spec["group"],
            "auto_offset_reset": "earliest",
            "enable_auto_commit": spec.get("commit", "each") != "each",
            "fetch_max_wait_ms": 100,
            **spec.get("conf", {}),
        }
        c = AIOKafkaConsumer(**conf)
        c.subscribe(spec["topics"], listener=Listener())
        await c.start()
        emit("ready")
        commit_each = spec.get("commit", "each") == "each"
        try:
            while not stop.is_set():
                batches = await c.getmany(timeout_ms=100)
                for tp, records in batches.items():
                    for r in records:
                        if commit_each:
                            try:
                                await c.commit({tp: r.offset + 1})
                            except Exception as exc:
                                emit("commit_error", p=r.partition, o=r.offset, err=repr(exc))
                        emit("msg", p=r.partition, o=r.offset, v=(r.value or b"").decode())
        finally:
            await c.stop()
        emit("closed")

    asyncio.run(main())


RUNNERS = {"confluent": run_confluent, "kafka-python": run_kafka_python,
           "aiokafka": run_aiokafka}


def main() -> int:
    spec = json.loads(sys.argv[1])
    log_prefix = os.environ.get("GROUP_MEMBER_DEBUG_LOG")  # for debugging a failing test
    if log_prefix:
        import logging

        logging.basicConfig(filename=f"{log_prefix}.{os.getpid()}.log", level=logging.DEBUG,
                            format="%(asctime)s %(threadName)s %(name)s %(message)s")
    stop = watch_stdin()
    try:
        RUNNERS[spec["client"]](spec, stop)
    except Exception as exc:
        emit("crash", err=repr(exc), trace=traceback.format_exc())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
