"""Helpers for integration tests: is a real service up, and how does one start it."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import pytest


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require(available: bool, service: str, start_with: str) -> None:
    """Skip the test unless ``service`` answers (a failure under CI=true, see conftest)."""
    if not available:
        pytest.skip(f"{service} is not running here; start it with: {start_with}")


def stop(process: subprocess.Popen[Any], timeout: float = 30) -> None:
    """SIGTERM (a Celery worker's warm shutdown), then SIGKILL if it is not gone in time."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
