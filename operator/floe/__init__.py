"""floe: keeps Apache Iceberg tables compacted, embedded or as a Kubernetes operator."""

__version__ = "0.1.0"
