"""What the operator and the optimizer say to each other: task specs and results, the wire
models and errors of the task service, its client, and the storage and Spark settings both sides
read the same way.

It sits below the service, the scheduler and the optimizer application, and imports only
api, planning and kit, so both sides can share it.
"""
