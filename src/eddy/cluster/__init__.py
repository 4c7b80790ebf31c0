"""The cluster: Raft (sans-IO core, storage, driver, transport), several Raft groups on one
node, the controller (machine, service, client, RPCs), replication, placement, and a node's
part in the metadata service (``service``)."""
