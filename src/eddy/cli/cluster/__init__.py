"""`eddy cluster`: status and ping, leader elections, the Raft groups."""
