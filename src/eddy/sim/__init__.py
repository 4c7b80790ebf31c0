"""The deterministic simulation of a whole cluster: metadata quorum, controllers, brokers, the
offsets group and its clients, with invariant checks."""
