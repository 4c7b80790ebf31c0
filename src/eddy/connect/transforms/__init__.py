"""Transforms: pipeline steps compiled to Spark SQL column expressions."""
