"""Who a client is and what it may do: listeners and their security protocols, TLS, SASL and
SCRAM, connection limits, ACLs and the authorizer (local, or asked of a broker over the
mesh)."""
