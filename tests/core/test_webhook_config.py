"""The webhook egress settings (issue 27): system checks name a bad allow-list entry and an
environment webhook the policy would refuse; a retrying task waits as long as Retry-After asks."""

from __future__ import annotations

import pytest

from apps.core.checks import check_webhook_egress
from apps.core.errors import TransientAdapterError
from apps.core.retries import as_asked


def _ids(settings, allow=(), **urls):
    settings.WEBHOOK_ALLOW = list(allow)
    for name in ("SECURITY_WEBHOOK_URL", "SLO_WEBHOOK_URL", "QUOTA_WEBHOOK_URL"):
        setattr(settings, name, urls.get(name, ""))
    return [(p.id, p.msg) for p in check_webhook_egress()]


def test_a_bad_allow_list_entry_is_an_error(settings):
    [(check_id, msg)] = _ids(settings, ["chat.corp.example", "not a name", "10.0.0.0/8"])
    assert check_id == "core.E002" and "'not a name'" in msg


@pytest.mark.parametrize(("url", "allow", "warned"), [
    ("http://169.254.169.254/latest/", (), "cloud metadata"),
    ("http://localhost:8065/hooks/x", (), "loopback"),
    ("https://10.1.2.3/hooks/x", (), "private"),
    ("https://10.1.2.3/hooks/x", ("10.0.0.0/8",), ""),
    ("http://localhost:8065/hooks/x", ("localhost",), ""),
    ("https://hooks.slack.com/services/x", (), ""),
    ("https://chat.corp.example/hooks/x", (), ""),  # names are judged when sent (no DNS here)
])
def test_an_environment_webhook_the_policy_refuses_is_a_warning(settings, url, allow, warned):
    found = _ids(settings, allow, SLO_WEBHOOK_URL=url)
    if warned:
        [(check_id, msg)] = found
        assert check_id == "core.W003" and msg.startswith("SLO_WEBHOOK_URL") and warned in msg
    else:
        assert found == []


class _Task:
    """What ``as_asked`` needs of a bound Celery task: ``retry``."""

    def __init__(self) -> None:
        self.countdowns: list[float] = []

    def retry(self, exc: Exception, countdown: float) -> Exception:
        self.countdowns.append(countdown)
        return RuntimeError("retry")


def test_a_task_retries_no_sooner_than_retry_after_asks():
    task = _Task()
    with pytest.raises(RuntimeError, match="retry"), as_asked(task):
        raise TransientAdapterError("slow down", retry_after=120.0)
    assert task.countdowns == [120.0]


def test_without_retry_after_the_usual_backoff_applies():
    task = _Task()
    with pytest.raises(TransientAdapterError), as_asked(task):
        raise TransientAdapterError("the webhook could not be delivered")
    assert task.countdowns == []
