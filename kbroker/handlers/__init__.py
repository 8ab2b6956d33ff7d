"""Request handlers: thin functions joining decoded requests to storage and the controller.

Importing this package registers every handler in `registry.APIS`.
"""

from kbroker.handlers import api_versions, fetch, list_offsets, metadata, produce  # noqa: F401
