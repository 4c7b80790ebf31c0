"""The cluster: Raft (sans-IO core, storage, driver), the controller, placement."""
