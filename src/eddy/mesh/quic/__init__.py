"""The mesh transport (seed 000) on aioquic: one QUIC connection per node pair, its UDP
endpoint, dialing and peer verification, streams, errors."""
