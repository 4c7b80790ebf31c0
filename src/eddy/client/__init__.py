"""Client-side helpers for APIs the client libraries do not expose."""
