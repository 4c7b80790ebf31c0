"""Request handlers: each takes the broker and a decoded request, returns a response body."""
