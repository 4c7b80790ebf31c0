"""The controller's schedule of background tasks, its hooks and the storage GC, in virtual
time."""

from __future__ import annotations

import pytest

from eddy.cluster.controller import Controller, ControllerConfig, ControllerError
from eddy.cluster.controller.tasks import MAX_HOSTED_TOPICS, StorageGc, TaskSchedule
from eddy.cluster.placement import HashRing
from eddy.metadata import MetadataState
from eddy.metadata.commands import (
    CreateTopic,
    DeleteTopic,
    MetadataCommand,
    RegisterBroker,
    RegisterPipeline,
    UnregisterBroker,
)
from eddy.protocol.errors import ErrorCode


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def test_schedule_runs_tasks_at_their_intervals() -> None:
    schedule = TaskSchedule()
    schedule.add("fast", 100, 0)
    schedule.add("slow", 250, 0)
    runs: dict[str, list[int]] = {"fast": [], "slow": []}
    for now in range(0, 1001, 10):
        for name in schedule.due(now):
            runs[name].append(now)
    assert runs["fast"] == list(range(100, 1001, 100))
    assert runs["slow"] == [250, 500, 750, 1000]
    assert schedule.next_due() == 1100


def test_schedule_collapses_missed_runs_and_keeps_order() -> None:
    schedule = TaskSchedule()
    schedule.add("b", 100, 0)
    schedule.add("a", 30, 0)
    assert schedule.due(10_000) == ["b", "a"]  # once each, in the order added
    assert schedule.due(10_029) == []
    assert schedule.due(10_030) == ["a"]
    assert schedule.next_due() == 10_060
    with pytest.raises(ValueError, match="already"):
        schedule.add("a", 5, 0)
    with pytest.raises(ValueError, match="interval_ms"):
        schedule.add("c", 0, 0)
    schedule.restart(20_000)
    assert schedule.due(20_029) == []
    assert schedule.due(20_030) == ["a"]
    schedule.run_now("b", 20_031)
    assert schedule.due(20_031) == ["b"]
    schedule.remove("b")
    assert schedule.names() == ["a"]


def _controller(**config: int | bool) -> tuple[Controller, MetadataState]:
    state = MetadataState()
    ids = iter(range(1, 1000))
    controller = Controller(state, ControllerConfig(**config),  # type: ignore[arg-type]
                            HashRing(), id_source=lambda: tid(next(ids)))
    for node in (1, 2):
        assert state.apply(RegisterBroker(node, bytes([node]) * 32, None, "h:1", "h:2", 1)).ok
    controller.start(0)
    for node in (1, 2):
        for command in controller.on_heartbeat(node, 1, 0):
            assert state.apply(command).ok
    return controller, state


def test_pipeline_hook_runs_on_its_schedule_and_its_commands_are_proposed() -> None:
    controller, _ = _controller(pipeline_schedule_interval_ms=1000)
    calls: list[int] = []

    def schedule_pipelines(now_ms: int) -> list[MetadataCommand]:
        calls.append(now_ms)
        return [RegisterPipeline("p", b"spec")] if now_ms == 2000 else []

    controller.add_hook("pipeline-schedule", schedule_pipelines)
    out: list[MetadataCommand] = []
    for now in range(0, 3001, 250):
        for node in (1, 2):
            controller.on_heartbeat(node, 1, now)
        out.extend(controller.tick(now))
    assert calls == [1000, 2000, 3000]
    assert out == [RegisterPipeline("p", b"spec")]
    with pytest.raises(ValueError, match="no task"):
        controller.add_hook("nope", schedule_pipelines)


def test_a_failing_hook_is_recorded_and_fencing_goes_on() -> None:
    controller, state = _controller(offsets_retention_check_interval_ms=500)

    def broken(now_ms: int) -> list[MetadataCommand]:
        raise RuntimeError("boom")

    controller.add_hook("offset-expiry", broken)
    controller.add_task("custom", 700, 0)
    custom: list[int] = []

    def record(now_ms: int) -> list[MetadataCommand]:
        custom.append(now_ms)
        return []

    controller.add_hook("custom", record)
    for now in range(0, 2001, 250):
        controller.on_heartbeat(1, 1, now)
        for command in controller.tick(now):
            assert state.apply(command).ok
    assert not state.is_live(2) and state.is_live(1)
    assert controller.failures[0] == ("offset-expiry", "RuntimeError('boom')")
    assert custom == [750, 1500]  # due at 700 and 1400, seen at the next tick


def test_storage_gc_orders_deleted_topics_removed_on_every_node() -> None:
    controller, state = _controller(storage_gc_interval_ms=1000, storage_gc_grace_ms=1500)
    keep = controller.create_topic("keep", 1, 2, None, 0)
    gone = controller.create_topic("gone", 1, 2, None, 0)
    for command in (keep, gone):
        assert state.apply(command).ok
    assert isinstance(keep, CreateTopic) and isinstance(gone, CreateTopic)
    stray = tid(999)  # data of a topic this state never knew (say, from an old cluster)
    controller.report_hosted(1, [keep.topic_id, gone.topic_id])
    controller.report_hosted(2, [keep.topic_id, gone.topic_id, stray])
    assert state.apply(DeleteTopic("gone", None)).ok
    orders: list[tuple[int, dict[int, list[bytes]]]] = []
    for now in range(0, 5001, 250):
        for node in (1, 2):
            controller.on_heartbeat(node, 1, now)
        controller.tick(now)
        taken = controller.take_gc_orders()
        if taken:
            orders.append((now, taken))
    # first seen unknown at 1000, ordered once the grace has passed: at 3000, 4000, 5000
    assert [now for now, _ in orders] == [3000, 4000, 5000]
    assert orders[0][1] == {1: [gone.topic_id], 2: sorted([gone.topic_id, stray])}
    assert controller.take_gc_orders() == {}
    # node 1 deleted it and says so: no more orders for it
    controller.report_hosted(1, [keep.topic_id])
    assert controller.gc.plan(state, 6000) == {2: sorted([gone.topic_id, stray])}


def test_storage_gc_reports_are_checked() -> None:
    state = MetadataState()
    gc = StorageGc(0)
    with pytest.raises(ControllerError) as err:
        gc.report(state, 1, [])
    assert err.value.code == ErrorCode.broker_id_not_registered
    assert state.apply(RegisterBroker(1, b"k" * 32, None, "h:1", "h:2", 1)).ok
    with pytest.raises(ControllerError, match=r"topic_ids\[1\]"):
        gc.report(state, 1, [tid(1), b"short"])
    with pytest.raises(ControllerError, match="topic_ids: more than"):
        gc.report(state, 1, (tid(i) for i in range(MAX_HOSTED_TOPICS + 1)))
    gc.report(state, 1, [tid(5)])
    assert gc.plan(state, 0) == {1: [tid(5)]}
    assert state.apply(RegisterBroker(1, b"k" * 32, None, "h:1", "h:2", 2)).ok
    assert state.apply(UnregisterBroker(1)).ok
    assert gc.plan(state, 0) == {}  # a node that left is forgotten


def test_next_wakeup_is_the_earliest_expiry_probe_or_task() -> None:
    controller, _ = _controller(partition_reconcile_interval_ms=5000, probe_after_ms=0)
    # sessions from the heartbeats at 0 expire at 1500; the first task is due at 5000
    assert controller.next_wakeup(0) == 1500
    # an expired session (a dead broker's) wakes nobody again: no busy loop
    assert controller.next_wakeup(1500) == 5000
    probing, _ = _controller(partition_reconcile_interval_ms=5000, probe_after_ms=300)
    assert probing.next_wakeup(0) == 300  # silent brokers are probed a heartbeat late
