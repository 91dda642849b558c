"""Readers of external formats for jobs (OpenMetrics telemetry files, Kineto traces).

Same rules as every adapter (STYLE.md §2.3): no ORM, no settings, typed results, one
error type (``AdapterError``).
"""
