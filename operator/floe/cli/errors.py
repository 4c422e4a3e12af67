"""What the ``floe`` command reports without a traceback, and its exit code says: bad input (2)
or a failure (1)."""


class UsageError(Exception):
    """Bad arguments (exit 2)."""


class UnknownTable(LookupError):
    """The table asked for does not exist where it was looked for (exit 2)."""


class ClusterUnreachable(RuntimeError):
    """No cluster to ask, or it did not answer (exit 1)."""
