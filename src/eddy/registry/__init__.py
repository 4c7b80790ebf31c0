"""The schema registry (Confluent's REST API and semantics): schema formats, compatibility
checks, and (to come) the `_schemas`-backed store and the HTTP API."""
