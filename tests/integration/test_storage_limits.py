"""Storage limits against real `eddy serve` processes: one process per data dir, a node with
10,000 partitions under an fd limit of 1,024, and a full disk (a small tmpfs)."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import EddyProcess
from kafka_helpers import consume_all, create_topic, produce

Acked = dict[bytes, tuple[int, int]]  # value -> (partition, offset)


def _nofile(soft: int, hard: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return apply


def _open_files_limits(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files line in /proc/PID/limits")


def _fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[Callable[..., EddyProcess]]:
    """Make (not start) brokers; every one is killed at the end."""
    made: list[EddyProcess] = []

    def make(data_dir: Path, *args: str, nofile: tuple[int, int] | None = None) -> EddyProcess:
        p = EddyProcess(data_dir, list(args), _nofile(*nofile) if nofile else None)
        made.append(p)
        return p

    yield make
    for p in made:
        p.kill()


# ---- one process per data dir ----------------------------------------------------------------


def _serve(data_dir: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eddy", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=timeout,
    )


def test_a_second_broker_on_a_data_dir_in_use_exits_naming_the_holder(eddy: EddyProcess
                                                                      ) -> None:
    create_topic(eddy.bootstrap, "kept")
    produce(eddy.bootstrap, "kept", [b"before"])
    second = _serve(eddy.data_dir)
    assert second.returncode != 0
    assert eddy.proc is not None
    assert f"pid {eddy.proc.pid}" in second.stderr, second.stderr
    assert "Traceback" not in second.stderr, second.stderr
    # the first broker did not notice
    produce(eddy.bootstrap, "kept", [b"after"])
    assert [v for _, _, v in consume_all(eddy.bootstrap, "kept", 1)[0]] == [b"before", b"after"]
    # once it is gone, the directory is free again, with everything in it
    eddy.stop()
    eddy.start()
    assert [v for _, _, v in consume_all(eddy.bootstrap, "kept", 1)[0]] == [b"before", b"after"]


def test_a_broker_started_while_the_last_one_shuts_down_waits_for_a_clean_directory(
        brokers: Callable[..., EddyProcess], tmp_path: Path) -> None:
    """The issue's race: the new process must never see the old one's half-closed files."""
    first = brokers(tmp_path / "data").start()
    create_topic(first.bootstrap, "many", partitions=200)
    produce(first.bootstrap, "many", [b"v%d" % i for i in range(400)])
    assert first.proc is not None
    pid = first.proc.pid
    first.proc.terminate()
    for _ in range(500):  # catch it in the middle of its shutdown and hold it there
        if "shutting down" in first.logs():
            break
        time.sleep(0.01)
    os.kill(pid, signal.SIGSTOP)
    try:
        # the lock goes only after the last file is closed, after "stopped cleanly"
        if first.proc.poll() is None and "stopped cleanly" not in first.logs():
            refused = _serve(first.data_dir)
            assert refused.returncode != 0
            assert f"pid {pid}" in refused.stderr, refused.stderr
    finally:
        os.kill(pid, signal.SIGCONT)
    second = brokers(tmp_path / "data")
    for _ in range(60):  # the first may still be finishing: retry while it holds the lock
        try:
            second.start(timeout=30)
            break
        except RuntimeError as exc:
            assert "is in use by another eddy process" in str(exc), str(exc)
            second.proc = None
    else:
        pytest.fail("the second broker never started")
    assert "previous shutdown was not clean" not in second.logs()
    assert "Traceback" not in first.logs() + second.logs()
    got = consume_all(second.bootstrap, "many", 200)
    assert sum(len(r) for r in got.values()) == 400


# ---- file descriptors ---------------------------------------------------------------------------


def test_the_soft_open_files_limit_is_raised_to_the_hard_one(
        brokers: Callable[..., EddyProcess], tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 1024:
        pytest.skip(f"the hard open-files limit here is {hard}: nothing to raise to")
    target = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    b = brokers(tmp_path / "data", nofile=(1024, target)).start()
    assert b.proc is not None
    assert _open_files_limits(b.proc.pid) == (target, target)
    assert "raised the open-files limit (RLIMIT_NOFILE) from 1024 to" in b.logs()


def _spread(partitions: int, count: int) -> list[int]:
    step = partitions // count
    return [i * step + (i % step) for i in range(count)]


def _produce_to(bootstrap: str, targets: list[tuple[str, int]], tag: bytes) -> Acked:
    acked: Acked = {}
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 30000})

    def cb(err, msg):  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.value()] = (msg.partition(), msg.offset())

    for topic, part in targets:
        p.produce(topic, value=b"%s-%s-%d" % (tag, topic.encode(), part), partition=part,
                  on_delivery=cb)
    assert p.flush(60) == 0
    assert not errors, errors[:5]
    return acked


def _read_back(bootstrap: str, targets: list[tuple[str, int]]) -> set[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fd-check",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "fetch.wait.max.ms": 50})
    try:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in targets])
        seen: set[bytes] = set()
        at_end: set[tuple[str, int]] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < len(targets) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                at_end.add((m.topic(), m.partition()))
                continue
            seen.add(m.value())
        return seen
    finally:
        c.close()


def test_ten_thousand_partitions_under_an_fd_limit_of_1024(
        brokers: Callable[..., EddyProcess], tmp_path: Path) -> None:
    """Soft and hard limit both 1,024, so raising cannot help: only closing cold files can."""
    b = brokers(tmp_path / "data", nofile=(1024, 1024)).start()
    assert b.proc is not None
    topics = [f"wide{i}" for i in range(4)]
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    futures = admin.create_topics([NewTopic(t, 2500, 1) for t in topics],
                                  operation_timeout=120, request_timeout=120)
    for f in futures.values():
        f.result(180)
    targets = [(t, p) for t in topics for p in _spread(2500, 40)]
    acked = _produce_to(b.bootstrap, targets, b"one")
    assert len(acked) == len(targets)
    assert _read_back(b.bootstrap, targets) == set(acked)
    assert _fd_count(b.proc.pid) < 1024
    # a restart opens all 10,000 partitions again under the same limit
    b.stop()
    b.start(timeout=120)
    assert b.proc is not None
    assert _open_files_limits(b.proc.pid) == (1024, 1024)
    acked |= _produce_to(b.bootstrap, targets, b"two")
    assert _read_back(b.bootstrap, targets) == set(acked)
    assert _fd_count(b.proc.pid) < 1024
    assert "Traceback" not in b.logs()


def test_a_file_cache_larger_than_the_fd_limit_shrinks_instead_of_failing(
        brokers: Callable[..., EddyProcess], tmp_path: Path) -> None:
    """storage.max.open.files set past what the process may open: when fds run out the
    request that hit it gets an error naming the limit, the broker gives fds back and keeps
    serving every partition."""
    b = brokers(tmp_path / "data", "--set", "storage.max.open.files=100000",
                nofile=(256, 256)).start()
    try:
        create_topic(b.bootstrap, "over", partitions=600)
    except KafkaException as exc:
        err: KafkaError = exc.args[0]
        assert err.code() == KafkaError.KAFKA_STORAGE_ERROR
        assert "RLIMIT_NOFILE" in err.str()
        create_topic(b.bootstrap, "over", partitions=600)
    targets = [("over", p) for p in range(0, 600, 7)]
    acked = _produce_to(b.bootstrap, targets, b"x")
    assert _read_back(b.bootstrap, targets) == set(acked)
    assert "out of file descriptors" in b.logs()
    assert "Traceback" not in b.logs()


# ---- disk full ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the disk-full test: {done.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(directory: Path, leave: int) -> Path:
    """A file taking all the free space of directory's file system but `leave` bytes."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    filler = directory / "filler"
    with open(filler, "wb") as f:
        chunk = b"\0" * (1 << 20)
        remaining = free - leave
        while remaining > 0:
            n = f.write(chunk[: min(len(chunk), remaining)])
            remaining -= n
    return filler


def _produce_until_full(bootstrap: str, topic: str, partition: int, acks: str, acked: Acked,
                        first: int, value_size: int = 8000, limit: int = 2000) -> int:
    """Produce numbered values one at a time until the broker answers KAFKA_STORAGE_ERROR
    twice in a row; returns the next number. Every error must be that one."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                  "retries": 0, "enable.idempotence": False, "message.timeout.ms": 10000})
    errors: list[KafkaError] = []

    def cb(err, msg):  # type: ignore[no-untyped-def]
        if err is None:
            acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            errors.append(err)

    n = first
    streak = 0
    for _ in range(limit):
        before = len(errors)
        p.produce(topic, value=b"%08d" % n + b"." * value_size, partition=partition,
                  on_delivery=cb)
        n += 1
        assert p.flush(15) == 0
        streak = streak + 1 if len(errors) > before else 0
        if streak >= 2:
            break
    else:
        pytest.fail("the disk never filled up")
    assert {e.code() for e in errors} == {KafkaError.KAFKA_STORAGE_ERROR}, errors[:3]
    return n


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> KafkaError | None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        return None
    except KafkaException as exc:
        err: KafkaError = exc.args[0]
        return err
    finally:
        c.close()


def _committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        offset: int = c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
        return offset
    finally:
        c.close()


def _assert_all_acked_readable(bootstrap: str, topic: str, partitions: int,
                               acked: Acked) -> None:
    got = consume_all(bootstrap, topic, partitions)
    stored = {v: (p, o) for p, recs in got.items() for o, _, v in recs}
    assert set(acked) <= set(stored), f"lost: {sorted(set(acked) - set(stored))[:3]}"
    assert all(stored[v] == where for v, where in acked.items())
    for recs in got.values():  # no hole, no torn batch: offsets are dense from the start
        offsets = [o for o, _, _ in recs]
        assert offsets == list(range(len(offsets)))


def test_a_full_disk_fails_produce_with_a_storage_error_and_loses_nothing_acknowledged(
        brokers: Callable[..., EddyProcess], tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "data", "8m") as data:
        b = brokers(data, "--set", "log.segment.bytes=262144",
                    "--set", "log.flush.interval.messages=1").start()
        create_topic(b.bootstrap, "full", partitions=2)
        create_topic(b.bootstrap, "other", partitions=1)
        produce(b.bootstrap, "other", [b"o1"])
        assert _commit(b.bootstrap, "g", "other", 1) is None  # makes __consumer_offsets
        acked: Acked = {v: (p, o) for p, o, v in
                        produce(b.bootstrap, "full", [b"pre%d" % i for i in range(10)])}
        n = 0
        filler = _fill(data, leave=600_000)
        # both acks=all and acks=1 fill it up and get KAFKA_STORAGE_ERROR
        n = _produce_until_full(b.bootstrap, "full", 0, "all", acked, n)
        n = _produce_until_full(b.bootstrap, "full", 1, "1", acked, n)
        assert acked, "nothing was acknowledged before the disk filled"
        assert b.alive()
        # reads still work for every client, and show exactly what was acknowledged
        _assert_all_acked_readable(b.bootstrap, "full", 2, acked)
        assert [v for _, _, v in consume_all(b.bootstrap, "other", 1)[0]] == [b"o1"]
        # a group's offset commit is answered (it may still fit in a page the offsets log
        # has) and remembered only when it was written
        err = _commit(b.bootstrap, "g", "other", 2)
        assert _committed(b.bootstrap, "g", "other") == (1 if err else 2)
        # space comes back: appends resume on the same broker, to every partition (the
        # offsets group reopens its storage when next asked to write: a commit then may
        # still be refused with NOT_COORDINATOR, and a retry goes through)
        filler.unlink()
        for _ in range(50):
            err = _commit(b.bootstrap, "g", "other", 3)
            if err is None:
                break
            assert err.code() in (KafkaError.NOT_COORDINATOR,
                                  KafkaError.COORDINATOR_NOT_AVAILABLE), err
            time.sleep(0.2)
        assert err is None, err
        assert _committed(b.bootstrap, "g", "other") == 3
        more = produce(b.bootstrap, "full", [b"back%d" % i for i in range(20)])
        acked.update({v: (p, o) for p, o, v in more})
        produce(b.bootstrap, "other", [b"o2"])
        _assert_all_acked_readable(b.bootstrap, "full", 2, acked)
        # full again, then a kill -9 at that moment; the restart still sees a full disk
        filler = _fill(data, leave=400_000)
        n = _produce_until_full(b.bootstrap, "full", 0, "all", acked, n)
        b.kill()
        b.start(timeout=60)
        _assert_all_acked_readable(b.bootstrap, "full", 2, acked)
        filler.unlink()
        more = produce(b.bootstrap, "full", [b"after-restart"], partition=1)
        acked.update({v: (p, o) for p, o, v in more})
        _assert_all_acked_readable(b.bootstrap, "full", 2, acked)
        assert "Traceback" not in b.logs(), b.logs()[-3000:]
        b.stop()
