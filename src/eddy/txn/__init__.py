"""Producer ids, sequences and transactions (KIP-98): the sans-IO coordinator and producer
state, and the broker's service that runs it (``service``, on the ``offsets`` Raft group:
``raft_store``), writing markers to the partitions' leaders (``markers``, ``rpc``)."""
