"""Dynamic broker configs (Kafka's ``kafka-configs --entity-type brokers``): the broker-wide
defaults of topic configs (``log.retention.ms``, ``message.max.bytes``...), set at run time
for one broker or for every broker (the ``<default>`` resource, the empty name), with no
restart.

In a cluster they live in the replicated metadata state: a change is an
``AlterBrokerConfigs`` command the controller applies, and every broker follows its replica
of the state. A node on its own keeps them in ``DATA_DIR/dynamic-broker-configs.json``.
Either way a broker applies them as its topic defaults: a topic's config is its override,
else this broker's dynamic value, else the cluster's ``<default>``, else the static config
(file, environment, ``--set``), else Kafka's default.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from eddy.cluster.controller.rpc import ProposeRequest
from eddy.log.state_files import atomic_write
from eddy.metadata import encode_command
from eddy.metadata.commands import AlterBrokerConfigs
from eddy.metadata.configs import (
    DYNAMIC_BROKER_CONFIGS,
    MAX_ENTRIES,
    check_broker_configs,
    dict_to_entries,
    layered_defaults,
)
from eddy.metadata.result import Rejected
from eddy.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from eddy.broker.broker import Broker
    from eddy.cluster.service import ClusterService

log = logging.getLogger(__name__)

LOCAL_FILE = "dynamic-broker-configs.json"
#: the key of the cluster-wide ``<default>`` resource in the local file
DEFAULT_KEY = "<default>"
#: how long a change may take to reach this node's replica of the metadata state
APPLY_WAIT_S = 10.0


def resource_node(name: str, node_id: int) -> int | None:
    """The node a BROKER resource name stands for: "" is the cluster-wide ``<default>``
    (None), else this node's id; another broker's configs are altered through that broker,
    as Kafka's admin clients do."""
    if name == "":
        return None
    if name != str(node_id):
        raise KafkaError(ErrorCode.invalid_request, f"broker {name} is not this node")
    return node_id


def checked(configs: Mapping[str, str]) -> dict[str, str]:
    """``configs`` if every name is a dynamic broker config with a valid value."""
    try:
        check_broker_configs(configs)
    except Rejected as exc:
        raise KafkaError(exc.code, exc.message) from None
    if len(configs) > MAX_ENTRIES:
        raise KafkaError(ErrorCode.invalid_request, f"more than {MAX_ENTRIES} configs")
    return dict(configs)


class DynamicConfigs:
    """A broker's dynamic configs and the topic defaults they make."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.static = broker.config.topic_defaults()
        self.path = os.path.join(broker.config.data_dir, LOCAL_FILE)
        self._local: dict[int | None, dict[str, str]] = {}

    # ---- reading -------------------------------------------------------------------------

    def layer(self, node: int | None) -> dict[str, str]:
        """The dynamic configs set for ``node`` (None: the cluster-wide ``<default>``)."""
        cluster = self.broker.cluster
        if cluster is not None:
            return cluster.state.broker_config(node)
        return dict(self._local.get(node, {}))

    def topic_defaults(self) -> dict[str, str]:
        """This broker's topic defaults, by topic config name."""
        return layered_defaults(self.static, self.layer(None), self.layer(self.broker.node_id))

    def apply(self) -> None:
        """Make the topic defaults the logs resolve configs with the current ones."""
        defaults = self.topic_defaults()
        if defaults != self.broker.logs.defaults:
            self.broker.logs.set_defaults(defaults)
            log.info("topic defaults now %s", {k: v for k, v in defaults.items()
                                              if self.static.get(k) != v})

    # ---- the local file (a node on its own) ------------------------------------------------

    def load(self) -> None:
        """Read the local file (a node on its own); a bad file is logged and ignored."""
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
            local: dict[int | None, dict[str, str]] = {}
            for key, configs in dict(raw).items():
                node = None if key == DEFAULT_KEY else int(key)
                local[node] = checked({str(k): str(v) for k, v in dict(configs).items()})
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, KafkaError) as exc:
            log.error("%s unreadable (%s): no dynamic broker config applied", self.path, exc)
            return
        self._local = local
        self.apply()

    def _save_local(self, local: dict[int | None, dict[str, str]]) -> None:
        data = {DEFAULT_KEY if node is None else str(node): configs
                for node, configs in local.items() if configs}
        try:
            atomic_write(self.path, json.dumps(data, sort_keys=True).encode())
        except OSError as exc:
            raise KafkaError(ErrorCode.kafka_storage_error,
                             f"cannot write {LOCAL_FILE}: {exc}") from None

    async def import_local(self, cluster: ClusterService) -> None:
        """A node that kept dynamic configs on its own (its local file) and now runs in a
        cluster (a cluster of one by default) brings them into the cluster's metadata: each
        layer the cluster has nothing for yet; a layer the cluster already sets is kept as
        the cluster has it. The file is renamed ``.imported`` once done."""
        if not self._local:
            return
        for node, configs in sorted(self._local.items(), key=lambda kv: kv[0] or -1):
            if not configs:
                continue
            if cluster.state.broker_config(node):
                log.warning("dynamic configs of %s kept as the cluster has them; this node's "
                            "own (%s) not imported", "<default>" if node is None else node,
                            sorted(configs))
                continue
            command = AlterBrokerConfigs(node, dict_to_entries(configs), ())
            try:
                await cluster.ask_checked(ProposeRequest(encode_command(command)),
                                          APPLY_WAIT_S)
            except KafkaError as exc:
                log.error("dynamic configs not imported (%s): tried again at the next start",
                          exc.message)
                return
            log.info("dynamic configs of %s are now the cluster's: %s",
                     "<default>" if node is None else f"broker {node}", sorted(configs))
        try:
            os.replace(self.path, self.path + ".imported")
        except OSError as exc:
            log.error("%s not renamed after its import: %s", self.path, exc)
        self._local = {}

    # ---- changing --------------------------------------------------------------------------

    async def replace(self, node: int | None, new: Mapping[str, str]) -> None:
        """Make ``new`` the whole set of ``node``'s dynamic configs (checked first)."""
        new = checked(new)
        current = self.layer(node)
        if new == current:
            return
        cluster = self.broker.cluster
        if cluster is None:
            local = dict(self._local)
            local[node] = new
            self._save_local(local)
            self._local = local
            self.apply()
            return
        command = AlterBrokerConfigs(node, dict_to_entries(
            {k: v for k, v in new.items() if current.get(k) != v}),
            tuple(sorted(set(current) - set(new))))
        await cluster.ask_checked(ProposeRequest(encode_command(command)), APPLY_WAIT_S)
        if not await cluster.wait_applied(lambda s: s.broker_config(node) == new,
                                          APPLY_WAIT_S):
            raise KafkaError(ErrorCode.request_timed_out,
                             "the change is not on this node's replica of the metadata yet")


def is_dynamic(name: str) -> bool:
    return name in DYNAMIC_BROKER_CONFIGS
