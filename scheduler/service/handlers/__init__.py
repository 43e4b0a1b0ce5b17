"""The REST API's handlers, one module per resource, each ending in a ``default_handlers``
URL table; ``routes`` gathers them under the service prefix."""
