"""A fault harness of our own, in the Jepsen style (issue 28), shared by tests/system and
`python -m bench.chaos`:

- `cluster`: three `eddy serve` nodes (broker and metadata voter each) on a loopback block
  of their own, restartable on the same ports and data;
- `net`: iptables partitions between nodes, and the CPU hog;
- `faults`: the fault kinds (kill -9, SIGSTOP, isolation, controller kill, two nodes
  down, SIGTERM rolling restarts, transactions), each healing and waiting for full ISRs;
- `workload`: the idempotent acks=all writer and its journal, the transactional writer,
  read_committed reads;
- `checks`: lost, duplicated, misplaced, out of order, transactions, fatal client
  errors, replicas' bytes, and unavailability (the longest gap in acknowledged writes);
- `rounds`: one round (a topic, its faults, the checks), what tests assert and the bench
  reports.
"""
