"""CreateAcls, DescribeAcls and DeleteAcls with no authorizer configured.

Eddy has no authorizer yet (``authorizer.class.name`` comes with it), and Apache Kafka with
none answers these APIs with SECURITY_DISABLED: every creation and every delete filter
gets the error, a describe gets it at the top level, and nothing is stored. Eddy answers
exactly so, which Kafka's tools and admin clients already explain to their users.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from eddy.broker.broker import Broker

# The controller path (CreateAcl/DeleteAcl metadata commands) is wired when the authorizer exists.

_NO_TIME = datetime.timedelta(0)
DISABLED = ErrorCode.security_disabled
#: Kafka's messages (its AclApis): per result for create and delete, top level for describe
NO_AUTHORIZER = "No Authorizer is configured."
NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"


async def create_acls(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.CREATE_ACLS, req.api_version)
    results = tuple(build(mod.AclCreationResult, error_code=DISABLED,
                          error_message=NO_AUTHORIZER)
                    for _ in req.body.creations)
    return build(mod.CreateAclsResponse, throttle_time=_NO_TIME, results=results)


async def describe_acls(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.DESCRIBE_ACLS, req.api_version)
    return build(mod.DescribeAclsResponse, throttle_time=_NO_TIME, error_code=DISABLED,
                 error_message=NO_AUTHORIZER_DESCRIBE, resources=())


async def delete_acls(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.DELETE_ACLS, req.api_version)
    results = tuple(build(mod.DeleteAclsFilterResult, error_code=DISABLED,
                          error_message=NO_AUTHORIZER, matching_acls=())
                    for _ in req.body.filters)
    return build(mod.DeleteAclsResponse, throttle_time=_NO_TIME, filter_results=results)
