"""Reading, loading and writing Iceberg tables through pyiceberg: the layer every commit goes through.

Importing it lets pyiceberg write format v3 table metadata
(`floe.tables.pyiceberg_compat.allow_v3_metadata_writes`): every floe process that commits (the
CLI, ``floe run``, the operator, the optimizer) opens its catalogs and tables through this
package, so v3 metadata writing is on for every catalog floe commits through, whichever module
the process started from and whichever job commits first.
"""

from floe.tables.pyiceberg_compat import allow_v3_metadata_writes

allow_v3_metadata_writes()
