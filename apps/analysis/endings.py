"""How a job ended, in words, and what to check for each kind of ending (pure).

Slurm records an ending as a state (``FAILED``, ``OUT_OF_MEMORY``, ``TIMEOUT``...) and an
exit status ``code:signal`` (sacct's ``ExitCode``: the batch script's exit code, and the
signal that killed it). ``explain`` turns those, the run and time limit, the memory peak
against the request and the output paths into an ``Ending``: a title, the cause in words,
who usually fixes it, and a "what to check" list. ``output_paths`` says where the job's
stdout and stderr went: from the batch script's ``#SBATCH --output/--error`` lines, Slurm's
default when the script sets none, or nothing when no script was stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# --- Signals and exit codes --------------------------------------------------------------

SIGNALS: dict[int, tuple[str, str]] = {
    1: ("SIGHUP", "hang-up: the terminal or session that started it went away"),
    2: ("SIGINT", "interrupt (Ctrl-C)"),
    4: ("SIGILL", "illegal instruction: a binary built for another CPU"),
    6: ("SIGABRT", "abort: a failed assertion, a C++ exception or a CUDA/NCCL abort"),
    7: ("SIGBUS", "bus error: often a full /dev/shm (DataLoader workers) or a truncated "
                  "memory-mapped file"),
    8: ("SIGFPE", "arithmetic error (integer division by zero)"),
    9: ("SIGKILL", "killed outright (it cannot be caught)"),
    10: ("SIGUSR1", "user signal 1 (often a warning sent before the time limit)"),
    11: ("SIGSEGV", "segmentation fault: a crash in native code"),
    12: ("SIGUSR2", "user signal 2"),
    13: ("SIGPIPE", "broken pipe: wrote to a reader that had gone"),
    15: ("SIGTERM", "asked to stop (scancel, the time limit, or a shutdown)"),
}
OOM_SIGNAL = 125  # what slurmdbd records for an OUT_OF_MEMORY ending (0:125)

EXIT_CODES: dict[int, str] = {
    1: "a general error: for Python, an uncaught exception (the traceback ends stderr)",
    2: "a usage error: the program rejected its arguments (Python's argparse exits 2), or "
       "bash misused a builtin",
    126: "the command was found but could not run (not executable, or no permission)",
    127: "command not found: a missing program, module or virtual environment on the PATH",
    255: "exit status out of range (exit(-1)), or a launcher (ssh, mpirun) failure",
}


def signal_words(signal: int) -> str:
    """``SIGKILL (9): killed outright ...``; an unknown number says so."""
    if signal == OOM_SIGNAL:
        return "Slurm's out-of-memory mark (125)"
    name, words = SIGNALS.get(signal, (f"signal {signal}", "no common meaning"))
    return f"{name} ({signal}): {words}"


def exit_words(code: int) -> str:
    """What an exit code usually means; 128+N is a command killed by signal N."""
    if code == 0:
        return "success"
    if code in EXIT_CODES:
        return EXIT_CODES[code]
    if 128 < code < 128 + 65:
        return f"its last command was killed by {signal_words(code - 128)}"
    return "the program's own code: its documentation or stderr says what it means"


# --- Output paths ------------------------------------------------------------------------


@dataclass(frozen=True)
class JobNames:
    """What Slurm's filename patterns expand from."""

    job_id: int
    user: str = ""
    name: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    first_node: str = ""
    work_dir: str = ""


@dataclass(frozen=True)
class OutputPaths:
    stdout: str  # "" when unknown
    stderr: str
    source: str  # where the paths come from, in words

    @property
    def known(self) -> bool:
        return bool(self.stdout)


DEFAULT_OUTPUT = "slurm-%j.out"
DEFAULT_ARRAY_OUTPUT = "slurm-%A_%a.out"
_PATTERN = re.compile(r"%%|%(\d*)([AajxuNnts])")


def expand(pattern: str, job: JobNames) -> str:
    """Expand sbatch's filename pattern (``%x-%j.out``) as Slurm does for the batch step,
    relative to the working directory; ``%%`` is a literal ``%``, ``%5j`` pads."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        width, key = match.group(1), match.group(2)
        array = job.array_job_id is not None and job.array_task_id is not None
        values = {"j": job.job_id, "x": job.name, "u": job.user, "N": job.first_node,
                  "A": job.array_job_id if array else job.job_id,
                  "a": job.array_task_id if array else 4294967294,  # NO_VAL, as Slurm prints
                  "n": 0, "t": 0, "s": "batch"}
        value = str(values[key])
        return value.zfill(int(width)) if width and value.isdigit() else value

    path = _PATTERN.sub(one, pattern)
    if job.work_dir and not path.startswith("/"):
        path = f"{job.work_dir.rstrip('/')}/{path}"
    return path


def output_paths(job: JobNames, script_stored: bool, stdout_pattern: str = "",
                 stderr_pattern: str = "") -> OutputPaths:
    """Where the batch step's output went: the script's ``#SBATCH`` lines, Slurm's default
    when it sets none, or unknown without a stored script. stderr goes with stdout unless
    ``--error`` is set."""
    if not script_stored:
        return OutputPaths("", "", "no batch script is stored for this job, and Slurm's "
                                   "accounting before 23.02 does not record output paths")
    array = job.array_job_id is not None and job.array_task_id is not None
    default = DEFAULT_ARRAY_OUTPUT if array else DEFAULT_OUTPUT
    out = expand(stdout_pattern or default, job)
    err = expand(stderr_pattern, job) if stderr_pattern else out
    if stdout_pattern or stderr_pattern:
        source = "the job script's #SBATCH lines (an sbatch command-line option overrides them)"
    else:
        source = ("Slurm's default: the job script sets no --output (an sbatch command-line "
                  "option would override it)")
    return OutputPaths(out, err, source)


# --- Endings -----------------------------------------------------------------------------


@dataclass(frozen=True)
class EndingFacts:
    """What Slurm recorded about a job's end (and its memory, where known)."""

    state: str
    exit_code: int | None = None
    signal: int | None = None
    started: bool = True
    run_s: float | None = None
    time_limit_s: float | None = None
    mem_requested_mb: float | None = None  # per node, as the allocation gives it
    mem_peak_mb: float | None = None  # the largest task's peak resident memory (MaxRSS)
    nodes: int = 1


@dataclass(frozen=True)
class Ending:
    kind: str
    title: str
    cause: str  # the exit status and state in words
    owner: str  # researcher, platform, hardware, nobody
    severity: str  # info, warning, critical
    checks: tuple[str, ...]
    memory: str  # peak against request, in words ("" when neither is known)
    status: str  # sacct's ExitCode, "3:0"


OWNER_WORDS = {"researcher": "the job's owner (the code or its resources)",
               "platform": "the platform team", "hardware": "the hardware on-call",
               "nobody": "nobody: nothing went wrong"}


def explain(f: EndingFacts) -> Ending | None:
    """The job's ending in words; None while it has not ended (pending, running)."""
    kind = ending_kind(f)
    if kind is None:
        return None
    title, owner, severity = KINDS[kind]
    return Ending(kind, title, _cause(kind, f), owner, severity, _checks(kind, f),
                  memory_words(f.mem_peak_mb, f.mem_requested_mb, kind == "oom"),
                  f"{f.exit_code or 0}:{f.signal or 0}")


# kind -> (title, owner, severity)
KINDS: dict[str, tuple[str, str, str]] = {
    "completed": ("Completed normally", "nobody", "info"),
    "exit": ("Failed: the script exited with an error", "researcher", "warning"),
    "signal": ("Failed: killed by a signal", "researcher", "warning"),
    "sigkill": ("Killed (SIGKILL)", "researcher", "warning"),
    "oom": ("Killed by the out-of-memory killer", "researcher", "warning"),
    "cancelled": ("Cancelled", "nobody", "info"),
    "cancelled_pending": ("Cancelled before it started", "nobody", "info"),
    "timeout": ("Stopped at its time limit", "researcher", "warning"),
    "node_fail": ("A node failed under the job", "hardware", "critical"),
    "preempted": ("Preempted by a higher-priority job", "platform", "info"),
    "boot_fail": ("A node failed to boot for the job", "hardware", "critical"),
    "deadline": ("Stopped at its deadline", "researcher", "info"),
    "unknown": ("Ended in an unknown state", "platform", "warning"),
}
ACTIVE = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED", "CONFIGURING",
          "RESIZING", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED")


def ending_kind(f: EndingFacts) -> str | None:
    """Which kind of ending: the state first (Slurm knows the OOM killer and the time
    limit), then the exit status for plain failures."""
    state = f.state.upper()
    if state in ACTIVE:
        return None
    by_state = {"OUT_OF_MEMORY": "oom", "TIMEOUT": "timeout", "NODE_FAIL": "node_fail",
                "PREEMPTED": "preempted", "BOOT_FAIL": "boot_fail", "DEADLINE": "deadline"}
    if state in by_state:
        return by_state[state]
    if f.signal == OOM_SIGNAL:
        return "oom"
    if state == "CANCELLED":
        if not f.started:
            return "cancelled_pending"
        return "sigkill" if f.signal == 9 else "cancelled"
    if state == "COMPLETED" and not f.exit_code and not f.signal:
        return "completed"
    if state in ("FAILED", "COMPLETED"):
        if f.signal == 9:
            return "sigkill"
        return "signal" if f.signal else "exit"
    return "unknown"


def _cause(kind: str, f: EndingFacts) -> str:
    code, signal = f.exit_code or 0, f.signal or 0
    status = f"Slurm recorded {f.state} with exit status {code}:{signal}"
    if kind == "oom":
        return (f"{status}: the kernel's out-of-memory killer stopped a process when the "
                "job's host memory reached what Slurm allocated (its cgroup limit).")
    if kind == "timeout":
        ran = f" after {_hms(f.run_s)} of its {_hms(f.time_limit_s)} limit" \
            if f.run_s is not None and f.time_limit_s else ""
        return (f"{status}: the job reached its time limit{ran}; Slurm sent SIGTERM, then "
                "SIGKILL once KillWait passed.")
    if kind == "node_fail":
        return (f"{status}: a node of the job stopped responding to Slurm (hardware, kernel "
                "or network): not the job's doing.")
    if kind == "preempted":
        return (f"{status}: a job of a higher-priority partition or QOS needed the resources; "
                "Slurm stopped (or requeued) this one.")
    if kind == "boot_fail":
        return f"{status}: a node allocated to the job failed to boot or start its daemon."
    if kind == "deadline":
        return f"{status}: the job's --deadline passed before it could finish."
    if kind == "cancelled_pending":
        return f"{status}: cancelled (scancel) while it waited in the queue; it never ran."
    if kind == "cancelled":
        sent = f", which sent {signal_words(signal)}" if signal else ""
        return f"{status}: cancelled by its owner or an admin (scancel){sent}."
    if kind == "sigkill":
        return (f"{status}: {signal_words(9)}. Sent by scancel --signal=KILL or an admin, or "
                "after the job did not stop within KillWait of SIGTERM; the kernel's OOM "
                "killer acting outside Slurm's memory accounting does the same.")
    if kind == "signal":
        return f"{status}: the batch script was killed by {signal_words(signal)}."
    if kind == "exit":
        return f"{status}: the batch script exited with code {code}, {exit_words(code)}."
    if kind == "completed":
        return f"{status}: the batch script exited with code 0."
    return f"{status}."


def _checks(kind: str, f: EndingFacts) -> tuple[str, ...]:
    code, signal = f.exit_code or 0, f.signal or 0
    stderr = "Read the end of the job's stderr (its path is below): the last lines name the error."
    if kind == "oom":
        return (_oom_request(f),
                "DataLoader workers each hold a copy of the dataset object: fewer workers, "
                "or a dataset that reads from disk rather than memory, lowers the peak.",
                "Memory that grows over the run is a leak (tensors or losses kept in a list "
                "without .item() or .detach()).",
                "A CUDA out-of-memory error is different: it fails the job with exit 1 and "
                "'CUDA out of memory' in stderr, and needs a smaller batch, not more --mem.")
    if kind == "timeout":
        return ("Save checkpoints during the run and resume from the last one; "
                "--signal=B:USR1@300 makes Slurm warn the script 5 minutes before the kill.",
                "Ask for a longer --time (up to the partition's maximum), or split the work "
                "into dependent jobs (--dependency=afterok).",
                "If the run usually finishes in time, compare its speed with earlier runs: "
                "the efficiency and straggler cards below show where time went.")
    if kind == "node_fail":
        return ("Resubmit the job (or submit with --requeue so Slurm does it); the failure "
                "was not in the code.",
                "The hardware on-call has the node's state and reason (sinfo -R); tell them if "
                "the same node fails again.")
    if kind == "boot_fail":
        return ("Resubmit; the platform team has the node's boot failure (sinfo -R).",)
    if kind == "preempted":
        return ("Checkpoint regularly and submit with --requeue so a preempted run resumes.",
                "For work that must not be interrupted, use a QOS or partition that is not "
                "preemptible (ask the platform team which).")
    if kind == "deadline":
        return ("Set a later --deadline or a shorter --time so the job can start in time.",)
    if kind in ("cancelled", "cancelled_pending"):
        return ("If nobody meant to cancel it, check workflow tools and dependencies that "
                "cancel jobs (a failed --dependency=afterok, a pipeline's cleanup).",)
    if kind == "sigkill":
        return ("If nobody ran scancel, check whether the job ignores SIGTERM (a trap, or a "
                "process that does not stop): Slurm then kills it after KillWait.",
                "Compare the memory peak with the request: the kernel's OOM killer also sends "
                "SIGKILL.", stderr)
    if kind == "signal":
        return (_signal_check(signal), stderr)
    if kind == "exit":
        return (_exit_check(code), stderr)
    return ()


def _oom_request(f: EndingFacts) -> str:
    if f.mem_peak_mb and f.mem_requested_mb:
        margin = max(f.mem_peak_mb * 1.2, f.mem_requested_mb * 1.5)
        return (f"Ask for more host memory: --mem={_mem_option(margin)} per node (the peak "
                "plus a margin), or --mem-per-gpu; the nodes' size caps what one job gets.")
    return ("Ask for more host memory (--mem or --mem-per-gpu); sacct -j <id> -o "
            "JobID,MaxRSS,ReqMem shows the peak of each step.")


def _signal_check(signal: int) -> str:
    return {
        11: "A crash in native code: check that the CUDA, NCCL and PyTorch builds match the "
            "node's driver; run once with PYTHONFAULTHANDLER=1 for a stack.",
        6: "An abort: look for an assertion, 'NCCL error' or 'CUDA error' just before the "
           "end of stderr; CUDA_LAUNCH_BLOCKING=1 points at the failing kernel.",
        7: "A bus error: with DataLoader workers, /dev/shm may be full (use fewer workers or "
           "file_system sharing); else a memory-mapped file was truncated.",
        15: "SIGTERM without a cancel or a time limit: a node or service shutdown; resubmit.",
    }.get(signal, "Find who sent the signal: scancel, an admin, or the program itself.")


def _exit_check(code: int) -> str:
    return {
        1: "An uncaught exception: the traceback at the end of stderr names it; 'CUDA out "
           "of memory' there means a smaller batch, not more --mem.",
        2: "Check the arguments the script passes (a usage message ends stderr) and paths "
           "that may not exist on the compute nodes.",
        126: "Make the command executable (chmod +x) and check the file system allows "
             "running it on the compute nodes.",
        127: "Check the module loads and the virtual environment activation in the script: "
             "the command is not on the compute node's PATH.",
    }.get(code, "Look up the program's exit codes; its stderr usually says what failed.")


def memory_words(peak_mb: float | None, requested_mb: float | None, oom: bool = False) -> str:
    """The memory peak against the request, in words ("" when neither is known)."""
    if peak_mb is None and requested_mb is None:
        return ""
    if peak_mb is None:
        return (f"{_gb(requested_mb)} requested per node; Slurm recorded no peak (MaxRSS) "
                "for this job.")
    if not requested_mb:
        return f"Peak {_gb(peak_mb)} (MaxRSS); no memory request was recorded."
    share = peak_mb / requested_mb
    text = (f"Peak {_gb(peak_mb)} of {_gb(requested_mb)} requested per node "
            f"({share:.0%}, Slurm's MaxRSS of the largest task).")
    if oom and share < 0.9:
        text += (" MaxRSS is sampled (every 30 s by default), so a fast spike to the limit "
                 "is missed: the limit was reached between samples.")
    return text


def _mem_option(mb: float) -> str:
    """An sbatch --mem value (whole units): 77G, or 900M below a gigabyte."""
    return f"{-(-int(mb) // 1024)}G" if mb >= 1024 else f"{int(mb)}M"


def _gb(mb: float | None) -> str:
    gib = (mb or 0.0) / 1024
    return f"{gib:.0f}G" if gib >= 10 else f"{gib:.1f}G"


def _hms(seconds: float | None) -> str:
    total = int(seconds or 0)
    hours, rest = divmod(total, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
