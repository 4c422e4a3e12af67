"""A seeded concurrency soak: writers of every kind commit to shared tables while `floe run`
optimizes and maintains them, and every snapshot Iceberg Java can still read is compared with an
oracle built from what each writer committed.

Modules, bottom up: ``rows`` (the tables' rows and the writers' operations on them), ``oracle``
(the expected rows of each snapshot), ``snapshots`` (the table's history as it is observed),
``writers`` (Spark, pyiceberg, Iceberg Java and floe's own row delta), ``maintainer`` (another
engine's maintenance), ``checker`` (reads each snapshot and judges it), ``floe_run`` (the
``floe run`` subprocess and its manifests), ``driver`` (one seed, then many) and ``__main__``
(the command line: ``python -m tests.soak --help``).
"""
