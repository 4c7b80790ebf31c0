"""The schema registry (Confluent's REST API and semantics): its state replayed from the
``_schemas`` topic, its operations, the HTTP API, writes forwarded over a cluster (the schema
formats themselves are ``eddy.formats``)."""
