"""Who a client is: listeners and their security protocols, TLS, SASL (issue 16's base)."""
