"""Plumbing every other floe package may use: file deletion, redaction, locks, background servers.

It sits below every other package and imports none of them, so anything may depend on it.
"""
