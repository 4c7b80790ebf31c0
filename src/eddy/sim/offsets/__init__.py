"""The offsets Raft group in the whole-cluster simulation: its group coordinator, the committing
clients, OffsetFetch."""
