"""Storage engine: segments, indexes, partition logs, recovery, retention, metadata."""
