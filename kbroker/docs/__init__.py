"""The reference pages in docs/ that are generated from the code, and their generators.

``python -m kbroker.docs`` (``make docs``) rewrites them: docs/configuration.md from
the settings tables, docs/compatibility.md from the API registry beside Kafka 4.3's
ranges, the metric table of docs/operations.md from the metric families the code
defines, and the layer list of docs/architecture.md from the import contract. ``python -m kbroker.docs --check`` fails, naming the page, when one is stale.
This package sits at the top of the layers (beside the CLI): it reads every layer.
"""
