"""The log manager: every topic and partition on this node, and the topic metadata file."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eddy.log.config import TopicConfig, validate_overrides
from eddy.log.file_cache import FILES
from eddy.log.partition import HIGH_WATERMARK_FILE, PartitionLog
from eddy.log.state_files import atomic_write
from eddy.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

METADATA_FILE = "topic_metadata.json"
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def validate_topic_name(name: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.invalid_topic_exception, "topic name is empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, f"topic name {name!r} is illegal")
    if len(name) > MAX_TOPIC_NAME:
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME}",
        )
    if not TOPIC_NAME_RE.match(name):
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name {name!r} may only contain ASCII letters, digits, '.', '_' and '-'",
        )


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]
    created_at_ms: int
    partitions: list[PartitionLog] = field(default_factory=list)
    config: TopicConfig = field(default_factory=TopicConfig)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "num_partitions": len(self.partitions),
            "configs": self.configs,
            "created_at_ms": self.created_at_ms,
        }


class LogManager:
    def __init__(self, data_dir: str, broker_topic_defaults: Mapping[str, str] | None = None):
        self.data_dir = data_dir
        self.topics_dir = os.path.join(data_dir, "topics")
        self.defaults = dict(broker_topic_defaults or {})
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self.clean_shutdown = False
        self.recovered = False  # loaded after a crash: sync everything before a clean close

    # ---- startup / shutdown --------------------------------------------------------------

    def load(self, now_ms: int) -> None:
        os.makedirs(self.topics_dir, exist_ok=True)
        marker = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
        self.clean_shutdown = os.path.exists(marker)
        if not self.clean_shutdown and os.listdir(self.topics_dir):
            log.warning("previous shutdown was not clean: validating active segments")
            self.recovered = True
        entries = self._read_metadata()
        known = {e["name"] for e in entries}
        # fallback: partition directories without a metadata entry (seed 001's recovery)
        for name in sorted(os.listdir(self.topics_dir)):
            tdir = os.path.join(self.topics_dir, name)
            if name in known or not os.path.isdir(tdir):
                continue
            parts = [p for p in os.listdir(tdir) if p.startswith("partition-")]
            if parts:
                log.warning("topic %s has data but no metadata entry: recovering it", name)
                entries.append(
                    {"name": name, "topic_id": str(uuid.uuid4()), "num_partitions": len(parts),
                     "configs": {}, "created_at_ms": now_ms}
                )
        for e in entries:
            topic = Topic(
                name=e["name"],
                topic_id=uuid.UUID(e["topic_id"]),
                configs=dict(e.get("configs", {})),
                created_at_ms=int(e.get("created_at_ms", now_ms)),
                config=TopicConfig(e.get("configs", {}), self.defaults),
            )
            for p in range(int(e["num_partitions"])):
                topic.partitions.append(
                    PartitionLog.open(
                        self._partition_dir(topic.name, p), topic.name, p, topic.config,
                        self.clean_shutdown, now_ms,
                    )
                )
            self.topics[topic.name] = topic
            self.by_id[topic.topic_id] = topic
        if self.clean_shutdown:
            os.unlink(marker)
        if entries:
            # a failure is logged; the file on disk still lists every topic but recovered ones
            with contextlib.suppress(KafkaError):
                self._write_metadata()

    def close(self, clean: bool = True) -> None:
        """fsync what was written and close every file. The clean-shutdown marker is written
        only when every fsync worked and no failed append is left to cut back, so that the
        next start validates the logs otherwise."""
        for topic in self.topics.values():
            for plog in topic.partitions:
                if clean:
                    clean = self._sync_for_shutdown(plog)
                plog.close()
        if clean and self.recovered:
            # this process started after a crash: what the crashed one wrote (and recovery
            # validated) may still be only in the page cache, and only written files were
            # fsynced above. One sync instead of an fsync of every segment.
            os.sync()
        if clean:
            try:
                atomic_write(os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE), b"clean\n")
            except OSError as exc:
                log.warning("cannot mark the shutdown clean (%s): the next start validates "
                            "the active segments", exc)

    @staticmethod
    def _sync_for_shutdown(plog: PartitionLog) -> bool:
        try:
            for seg in plog.segments:
                if seg.needs_repair:
                    seg.repair()
                seg.fsync()
        except OSError as exc:
            log.error("%s-%d: cannot sync on shutdown (%s): the next start validates the "
                      "active segments", plog.topic, plog.partition, exc)
            return False
        return True

    # ---- metadata file -------------------------------------------------------------------

    def _read_metadata(self) -> list[dict[str, Any]]:
        path = os.path.join(self.data_dir, METADATA_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return []
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a JSON list of topics")
        return data

    def _write_metadata(self) -> None:
        """Replace the metadata file; KAFKA_STORAGE_ERROR when it cannot be written (the
        callers then undo their change, so memory and disk agree)."""
        payload = json.dumps([t.to_json() for t in self.topics.values()], indent=2)
        try:
            atomic_write(os.path.join(self.data_dir, METADATA_FILE), payload.encode())
        except OSError as exc:
            log.error("cannot write %s: %s", METADATA_FILE, exc)
            raise KafkaError(
                ErrorCode.kafka_storage_error, f"cannot write the topic metadata: {exc}"
            ) from exc

    def _partition_dir(self, topic: str, partition: int) -> str:
        return os.path.join(self.topics_dir, topic, f"partition-{partition}")

    # ---- topics --------------------------------------------------------------------------

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def partition(self, topic: str, partition: int) -> PartitionLog | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return None
        return t.partitions[partition]

    def check_create(self, name: str, num_partitions: int, configs: Mapping[str, str | None]
                     ) -> dict[str, str]:
        validate_topic_name(name)
        if name in self.topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        if num_partitions < 1:
            raise KafkaError(
                ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
            )
        from eddy.log.config import InvalidConfig

        try:
            clean = validate_overrides(configs)
            TopicConfig(clean, self.defaults)
        except InvalidConfig as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        return clean

    def create_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str | None], now_ms: int,
        topic_id: uuid.UUID | None = None,
    ) -> Topic:
        """A new topic here; ``topic_id``: the one the cluster gave it (else a new one)."""
        clean = self.check_create(name, num_partitions, configs)
        tdir = os.path.join(self.topics_dir, name)
        if os.path.exists(tdir):
            shutil.rmtree(tdir)  # leftovers of a topic deleted before a crash
        topic = Topic(name, topic_id or uuid.uuid4(), clean, now_ms,
                      config=TopicConfig(clean, self.defaults))
        try:
            self._open_new_partitions(topic, num_partitions, now_ms)
            self.topics[name] = topic
            self.by_id[topic.topic_id] = topic
            self._write_metadata()
        except KafkaError:
            self.topics.pop(name, None)
            self.by_id.pop(topic.topic_id, None)
            self._discard_partitions(topic.partitions)
            shutil.rmtree(tdir, ignore_errors=True)
            raise
        log.info("created topic %s with %d partitions", name, num_partitions)
        return topic

    def _open_new_partitions(self, topic: Topic, total: int, now_ms: int) -> None:
        """Append new, empty partitions up to total; KAFKA_STORAGE_ERROR (having closed and
        removed the ones this call made) when the disk or the fds run out."""
        first = len(topic.partitions)
        try:
            for p in range(first, total):
                topic.partitions.append(PartitionLog.open(
                    self._partition_dir(topic.name, p), topic.name, p, topic.config, True,
                    now_ms,
                ))
        except OSError as exc:
            message = f"cannot create partitions of {topic.name}: {FILES.failure_message(exc)}"
            self._discard_partitions(topic.partitions[first:])
            del topic.partitions[first:]
            log.error("%s", message)
            raise KafkaError(ErrorCode.kafka_storage_error, message) from exc

    @staticmethod
    def _discard_partitions(partitions: list[PartitionLog]) -> None:
        for plog in partitions:
            plog.close()
            shutil.rmtree(plog.directory, ignore_errors=True)

    def delete_topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name}")
        del self.topics[name]
        del self.by_id[topic.topic_id]
        try:
            self._write_metadata()
        except KafkaError:
            self.topics[name] = topic
            self.by_id[topic.topic_id] = topic
            raise
        for plog in topic.partitions:
            plog.delete()
        shutil.rmtree(os.path.join(self.topics_dir, name), ignore_errors=True)
        log.info("deleted topic %s", name)
        return topic

    def set_defaults(self, defaults: Mapping[str, str]) -> None:
        """New broker-wide topic defaults (dynamic broker configs, checked by the caller):
        every topic's resolved config follows, live."""
        self.defaults = dict(defaults)
        for topic in self.topics.values():
            topic.config = TopicConfig(topic.configs, self.defaults)
            for plog in topic.partitions:
                plog.config = topic.config

    def alter_topic_configs(self, name: str, overrides: Mapping[str, str]) -> None:
        """Replace a topic's overrides (validated by the caller) and apply them live."""
        topic = self.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name}")
        config = TopicConfig(overrides, self.defaults)
        old = topic.configs
        topic.configs = dict(overrides)
        try:
            self._write_metadata()
        except KafkaError:
            topic.configs = old
            raise
        topic.config = config
        for plog in topic.partitions:
            plog.config = config
        log.info("topic %s configs now %s", name, overrides)

    def add_partitions(self, name: str, total: int, now_ms: int, validate_only: bool) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name}")
        current = len(topic.partitions)
        if total < current:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"Topic currently has {current} partitions, which is higher than the "
                f"requested {total}.",
            )
        if total == current:
            raise KafkaError(
                ErrorCode.invalid_partitions, f"Topic already has {current} partitions."
            )
        if validate_only:
            return
        self._open_new_partitions(topic, total, now_ms)
        try:
            self._write_metadata()
        except KafkaError:
            self._discard_partitions(topic.partitions[current:])
            del topic.partitions[current:]
            raise
        log.info("topic %s now has %d partitions", name, total)

    def empty_partition(self, name: str, index: int, leftovers: tuple[str, ...] = ()
                        ) -> PartitionLog:
        """Delete one partition's data, for a node no longer among its replicas: the log
        stays (the topic's partitions are a list, and its other partitions may still be
        hosted here) but empty, at offset 0, with no epoch history; ``leftovers`` (file
        names in its directory: a producer-state snapshot...) and its high watermark
        checkpoint are removed too. The same ``PartitionLog`` object: whoever holds it sees
        an empty log. KAFKA_STORAGE_ERROR if the disk fails."""
        plog = self.partition(name, index)
        if plog is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"unknown partition {name}-{index}")
        plog.truncate_fully_and_start_at(0)
        for leftover in (*leftovers, HIGH_WATERMARK_FILE):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(plog.directory, leftover))
        log.info("deleted the data of %s-%d: no longer a replica here", name, index)
        return plog

    def all_partitions(self) -> list[PartitionLog]:
        return [p for t in self.topics.values() for p in t.partitions]
