"""Integration tests against REAL services (PostgreSQL, Redis + Celery, Slurm, Prometheus).

Locally, a service that is down skips its tests with the command that starts it; under
``CI=true`` the root conftest turns every skip into a failure, and ``.ci/run`` starts the
services first.
"""
