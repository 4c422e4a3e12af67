"""The read-only web UI: groups, tables, a table's history as charts, the queue.

Served by the operator (``--ui-port``) and by ``floe run --ui-port``, from what the engine holds
in memory: a page view never calls a catalog. Server-rendered HTML with inline SVG charts, no
script and nothing fetched from elsewhere, so it works behind ``kubectl port-forward`` with no
internet access.
"""
