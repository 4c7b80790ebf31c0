"""The web console (issue 17): server-rendered pages on the admin listener, live-updated
by a small script polling JSON endpoints. See ``routes``."""

from eddy.observe.console.routes import Console, mount

__all__ = ["Console", "mount"]
