"""Spark data sources of the connectors besides topics: generated rows (eddy-datagen), HTTP
POSTs (eddy-webhook), rows as plain JSON."""
