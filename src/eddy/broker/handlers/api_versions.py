"""ApiVersions: advertise exactly the version ranges Eddy implements."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from kio.schema.api_versions.v0 import response as v0

from eddy.broker.broker import Broker
from eddy.protocol.apis import SUPPORTED, ApiKey, VersionRange
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode


def unsupported_response(versions: Mapping[ApiKey, VersionRange] = SUPPORTED) -> Any:
    """The v0 answer to an ApiVersions version we do not serve: the ranges `versions` has
    (a broker's, or a gateway's), so the client can retry lower."""
    return v0.ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            v0.ApiVersion(api_key=k, min_version=r.min, max_version=r.max)
            for k, r in sorted(versions.items())
        ),
    )


async def handle(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.API_VERSIONS, req.api_version)
    return build(
        mod.ApiVersionsResponse,
        error_code=ErrorCode.none,
        api_keys=tuple(
            mod.ApiVersion(api_key=k, min_version=r.min, max_version=r.max)
            for k, r in sorted(SUPPORTED.items())
        ),
        throttle_time=datetime.timedelta(0),
    )
