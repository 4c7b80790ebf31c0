"""The registry's operations with Confluent's semantics: schemas and subjects, /config and
/mode, parsing with bounds."""
