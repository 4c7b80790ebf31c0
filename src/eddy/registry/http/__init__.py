"""The registry's HTTP side: Confluent's REST resources, their route table, the server
plumbing."""
