"""The node mesh (seed 000): identities, postcard frames on QUIC streams, gossip."""
