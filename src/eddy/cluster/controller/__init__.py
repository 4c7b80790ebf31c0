"""The controller (seed 004's BrokerController) as a sans-IO state machine: it runs on the
``metadata`` group's leader, reads ``MetadataState`` and returns commands to propose."""

from eddy.cluster.controller.config import ControllerConfig, ControllerError
from eddy.cluster.controller.machine import Controller, TaskHook
from eddy.cluster.controller.registry import BrokerSessions
from eddy.cluster.controller.tasks import StorageGc, TaskSchedule

__all__ = [
    "BrokerSessions",
    "Controller",
    "ControllerConfig",
    "ControllerError",
    "StorageGc",
    "TaskHook",
    "TaskSchedule",
]
