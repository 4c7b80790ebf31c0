"""Raft in the style of etcd-io/raft: a pure state machine stepped by messages and ticks,
whose outputs (entries and hard state to persist, messages, entries to apply) a driver
carries out. Storage and the driver are separate modules."""
