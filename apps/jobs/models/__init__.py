"""The ``jobs`` app's models, one module per part; Django finds them all here.

``jobs`` (the Slurm record, GPU intervals) <- ``archive`` (the metric archive), ``traces``
(trace analyses) and ``diagnosis`` (rules and findings): the parts import ``jobs``, never the
reverse.
"""

from apps.jobs.models.archive import JobMetrics, JobMetricSummary, JobNodeMetrics
from apps.jobs.models.diagnosis import DiagnosisCondition, DiagnosisRule, JobFinding
from apps.jobs.models.jobs import Job, JobGpu
from apps.jobs.models.traces import TraceDigestGroup, TraceFanOut, TraceRankPhases, TraceRun

__all__ = ["DiagnosisCondition", "DiagnosisRule", "Job", "JobFinding", "JobGpu", "JobMetricSummary",
           "JobMetrics", "JobNodeMetrics", "TraceDigestGroup", "TraceFanOut", "TraceRankPhases",
           "TraceRun"]
