"""The Kubernetes controller (kopf): OptimizerGroups become Spark driver pods, OptimizedTables
become engine registrations, and what the engine does is written back as status and Events.

Modules, one idea each: `spark_conf` (a group's Spark settings), `objects` (the Kubernetes
objects of a group), `kube` (API access), `secrets` (catalog properties from Secrets, and
keeping them out of everything written), `groups` and `tables` (the kopf handlers),
`status` (the batched table-status flush), `leader` (who ticks the engine), `controller` (the
`Controller` the handlers share), `config` (how the operator runs), `events` (the Events it
posts), `catalog_secrets` (the tables' catalog Secrets, read again), `main` (the operator
process). The driver pod's program is `floe_optimizer.driver`, in the optimizer image.
"""
