"""A node: the parts its roles run, its Kafka listeners, the process that serves them."""
