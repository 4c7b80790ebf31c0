"""BROKER config requests sent with Eddy's raw client, for what confluent-kafka cannot send:
the cluster-wide <default> resource (the empty name) and a broker id the receiver is not."""

from __future__ import annotations

from kio.schema.describe_configs.v4.request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.static.primitive import i8

from eddy.client.raw import RawClient

BROKER = i8(4)


def alter_broker_config(port: int, broker: str, name: str, value: str | None) -> int:
    """IncrementalAlterConfigs (SET, or DELETE for None) of BROKER ``broker`` sent to the
    node on ``port``; its error code."""
    with RawClient("127.0.0.1", port) as raw:
        answer = raw.call(IncrementalAlterConfigsRequest(validate_only=False, resources=(
            AlterConfigsResource(resource_type=BROKER, resource_name=broker, configs=(
                AlterableConfig(name=name, value=value, config_operation=i8(
                    0 if value is not None else 1)),)),)))
    return int(answer.responses[0].error_code)


def describe_broker_default(port: int) -> dict[str, tuple[str | None, int]]:
    """The cluster-wide <default> dynamic configs, as (value, source) by name."""
    with RawClient("127.0.0.1", port) as raw:
        answer = raw.call(DescribeConfigsRequest(
            include_synonyms=True, include_documentation=False, resources=(
                DescribeConfigsResource(resource_type=BROKER, resource_name="",
                                        configuration_keys=None),)))
    [result] = answer.results
    assert result.error_code == 0, result
    return {c.name: (c.value, int(c.config_source)) for c in result.configs}
