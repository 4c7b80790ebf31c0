"""What the group coordinator service needs of the broker that holds it, as protocols.

The service lives inside ``Broker`` and uses a few of its parts; typing it against these
protocols instead of ``Broker`` keeps ``broker.py`` the only module that knows the whole
broker (the broker imports its services; they never import it back). ``Broker`` satisfies
each protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from eddy.broker.producers import ProducerStates
    from eddy.broker.settings import BrokerSettings
    from eddy.clock import Clock
    from eddy.log.manager import LogManager
    from eddy.telemetry.counters import HotCounters

__all__ = ["Counted", "LogHost"]


class Counted(Protocol):
    @property
    def counts(self) -> HotCounters: ...


class LogHost(Protocol):
    """The group coordinator service's view: config, clock, logs, metrics."""

    @property
    def config(self) -> BrokerSettings: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def logs(self) -> LogManager: ...

    @property
    def producers(self) -> ProducerStates: ...

    @property
    def metrics(self) -> Counted: ...
