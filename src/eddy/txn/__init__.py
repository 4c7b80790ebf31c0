"""Producer ids, sequences and transactions (KIP-98)."""
