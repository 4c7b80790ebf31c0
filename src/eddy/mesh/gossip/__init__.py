"""Gossip (seeds 000 and 002), sans-IO: the peer table, HyParView membership, Plumtree
broadcast, their messages, one node of them, a simulated network."""
