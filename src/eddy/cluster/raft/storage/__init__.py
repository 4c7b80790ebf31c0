"""A Raft group's durable storage: the log's segment files, the hard state and snapshot files,
the store over them."""
