"""Thin typed clients for the outside world (Slurm, Prometheus).

Rules (STYLE.md §2.3): configuration comes in through constructors, never from
django.conf.settings; responses become dataclasses at the boundary; every failure is an
``AdapterError`` (``TransientAdapterError`` when a retry can fix it); no ORM here.
"""
