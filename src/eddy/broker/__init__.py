"""The asyncio broker: listener, connection loop, and one handler module per API family."""
