"""The `eddy` command."""
