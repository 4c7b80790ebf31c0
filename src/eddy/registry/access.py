"""Who may do what on the schema registry when the node has an authorizer (the ACLs of the
Kafka listeners, for the principal ``eddy.security.http_auth`` authenticated).

A subject stands for a topic by Confluent's TopicNameStrategy (``topic_of_subject``):
``<topic>-key`` and ``<topic>-value`` are the topic ``<topic>``, any other subject a topic of
its own name. Each route has a ``Rule``:

- ``ANY``: any authenticated principal (schemas by id or guid, which serializers fetch; the
  schema types; the contexts; reading the global config and mode);
- ``READ``: DESCRIBE on the subject's topic (READ and WRITE imply it): versions, lookups,
  compatibility checks, the subject's config and mode;
- ``WRITE``: WRITE on the subject's topic: registering, deleting, setting or deleting the
  subject's config or mode;
- ``CONFIG_READ`` / ``CONFIG_WRITE``: ``/config`` and ``/mode`` with or without a subject:
  with one, ``READ`` / ``WRITE``; without, anyone reads, and changes need ALTER_CONFIGS on
  the cluster;
- ``LISTED``: the answer lists subjects and only those the principal may read are kept
  (``readable``).

A request without a caller (a listener without ``auth_middleware``: no security set up) is
let through, as a node without an authorizer lets every request through.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from aiohttp import web

from eddy.registry.contract import RegistryError
from eddy.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from eddy.security.http_auth import caller_of, denied_message

__all__ = ["FORBIDDEN", "Rule", "check", "may_read", "readable", "topic_of_subject"]

#: Confluent's error code of a 403
FORBIDDEN = 40301
_SUFFIXES = ("-key", "-value")


class Rule(Enum):
    ANY = "any"
    READ = "read"
    WRITE = "write"
    CONFIG_READ = "config-read"
    CONFIG_WRITE = "config-write"
    LISTED = "listed"


def topic_of_subject(subject: str) -> str:
    """The topic a subject belongs to by Confluent's TopicNameStrategy: ``orders-value`` and
    ``orders-key`` are ``orders``; any other subject (another strategy's, or a bare
    ``-value``) is taken as a topic of its own name."""
    for suffix in _SUFFIXES:
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return subject


def _forbidden(op: AclOperation, rtype: ResourceType, name: str, subject: str | None
               ) -> RegistryError:
    message = denied_message(op, rtype, name)
    if subject is not None and subject != name:
        message += f" (subject {subject})"
    return RegistryError(403, FORBIDDEN, message)


def _require_subject(request: web.Request, op: AclOperation, subject: str) -> None:
    caller = caller_of(request)
    topic = topic_of_subject(subject)
    if caller is not None and not caller.allowed(op, ResourceType.TOPIC, topic):
        raise _forbidden(op, ResourceType.TOPIC, topic, subject)


def may_read(request: web.Request, subject: str) -> bool:
    """May the request's caller read ``subject`` (DESCRIBE on its topic)?"""
    caller = caller_of(request)
    return caller is None or caller.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                            topic_of_subject(subject))


def readable(request: web.Request, subjects: Iterable[str]) -> set[str]:
    """The subjects of ``subjects`` the request's caller may read."""
    return {s for s in set(subjects) if may_read(request, s)}


def check(request: web.Request, rule: Rule) -> None:
    """RegistryError 403 (40301) unless the request's caller may run a route of ``rule``
    (``LISTED`` routes filter their answers instead)."""
    subject = request.match_info.get("subject")
    if rule in (Rule.READ, Rule.CONFIG_READ) and subject is not None:
        _require_subject(request, AclOperation.DESCRIBE, subject)
    elif rule in (Rule.WRITE, Rule.CONFIG_WRITE) and subject is not None:
        _require_subject(request, AclOperation.WRITE, subject)
    elif rule == Rule.CONFIG_WRITE:
        caller = caller_of(request)
        if caller is not None and not caller.allowed(AclOperation.ALTER_CONFIGS,
                                                     ResourceType.CLUSTER, CLUSTER_NAME):
            raise _forbidden(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME,
                             None)
    elif rule in (Rule.READ, Rule.WRITE):  # a route of a subject always has one
        raise RegistryError(500, 500, "Internal Server Error")
