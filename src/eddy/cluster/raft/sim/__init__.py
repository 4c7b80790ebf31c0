"""The deterministic simulation of a Raft group: network, disks, clients, safety and
linearizability checks, a lock-step harness."""
