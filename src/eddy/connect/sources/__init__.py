"""Source connectors, one module each: its spec model and its factory, registered on import."""
