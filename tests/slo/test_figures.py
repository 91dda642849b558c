"""The SLO list's counted events say their unit (issue 26: "Events 26130362" were GPU-seconds)."""

from __future__ import annotations

import pytest

from apps.slo.models import Objective, Scorecard
from apps.slo.views import events_text


@pytest.mark.parametrize(("sli", "total", "text"), [
    (Objective.Sli.GPU_EFFICIENCY, 26130362.0, "7,258.4 GPU-h"),
    (Objective.Sli.QUEUE_WAIT, 1234.0, "1,234 jobs started"),
    (Objective.Sli.JOB_SUCCESS, 87.0, "87 jobs ended"),
])
def test_events_carry_their_unit(sli, total, text):
    card = Scorecard(objective=Objective(name="x", sli=sli, target=0.9), total=total)
    assert events_text(card) == text
