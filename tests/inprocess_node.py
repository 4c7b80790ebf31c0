"""A node started by ``eddy.node.parts.start_node`` in the test's process, on an event loop
thread of its own: tests read its state on that loop (``run``) while real clients talk to
its Kafka listener."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from eddy.clock import WallClock
from eddy.config import load_config
from eddy.node.parts import Node, start_node, stop_node


class InProcessNode:
    def __init__(self, data_dir: Path, roles: str = "broker,controller") -> None:
        self.config = load_config(env={}, overrides={
            "node_id": 1, "data_dir": str(data_dir), "listen": "127.0.0.1:0",
            "process.roles": roles,
            # no admin listener on the host's port 9644, as for the nodes conftest starts
            "admin.listener": ""})
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.node: Node | None = None

    def run(self, coro: Any) -> Any:
        """Run ``coro`` on the node's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def start(self) -> InProcessNode:
        self.thread.start()
        self.node = self.run(start_node(self.config, WallClock()))
        return self

    def stop(self) -> None:
        try:
            if self.node is not None:
                self.run(stop_node(self.node))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    @property
    def bootstrap(self) -> str:
        assert self.node is not None and self.node.broker is not None
        return f"127.0.0.1:{self.node.broker.port}"
