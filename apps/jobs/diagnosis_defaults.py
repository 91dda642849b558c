"""The diagnosis rules Beacon ships: seeded by the jobs migration, editable in the admin.

``manage.py diagnosis_rules --reset`` puts these back. Thresholds were calibrated on the
simulator's planted pathologies and its healthy jobs (``manage.py verdict_report``,
docs/diagnosis.md): each finds its pathology and raises no alarm on a healthy job there.
Conditions are ``(fact, operator, value)``; shares are 0..1; yes/no facts are 1/0.
"""

from __future__ import annotations

from typing import Any

# The conditions the idle rules shipped with before issue 26 (their own thresholds): a
# migration moves rows still holding them to the one reading.
OLD_IDLE_CONDITIONS = {
    "idle-memory-held": [("busy", ">", 0.03), ("busy", "<=", 0.15), ("held_idle", ">=", 0.5),
                         ("run_hours", ">=", 4)],
    "idle-allocation": [("busy", "<=", 0.03), ("run_hours", ">=", 4)],
}

# GPUs busy but not computing, no GPU late: they wait for something (WAITING). With data
# flowing into them over PCIe that the network does not explain (host-to-GPU copies), they
# wait for input. PCIe receive alone is not enough: on a multi-node job GPUDirect RDMA
# writes the collectives' traffic into GPU memory over PCIe too (issue 28).
WAITING = [("sm_measured", ">=", 1), ("busy", ">=", 0.5), ("computing_share", "<=", 0.35),
           ("straggler_found", "<=", 0)]
INPUT_STALL = [*WAITING, ("host_rx_gbs", ">=", 1.0)]

DEFAULT_RULES: list[dict[str, Any]] = [
    # --- Data: the storage contact ------------------------------------------------------
    {"key": "input-stall", "area": "data", "severity": "warning", "order": 10,
     "title": "Input pipeline stall",
     "conditions": list(INPUT_STALL),
     "text": "GPUs were busy {busy} of the time but computing only {computing}, while "
             "host-to-GPU copies ran at {host_rx_gbs} per GPU (PCIe receive {pcie_rx_gbs}, "
             "less what the nodes' InfiniBand/RoCE ports delivered on a multi-node job): the "
             "GPUs wait for input batches, not for each other. It could also be other "
             "copies from host memory, such as activations or optimizer state offloaded to "
             "the CPU.",
     "hint": "Check the data loader (num_workers, pin_memory, prefetch_factor), the "
             "file system's read throughput for the dataset, and stage it to local NVMe "
             "if the shared file system is the bottleneck."},
    # The input stall's two readings, where node telemetry says what the nodes did: the
    # loader waits on storage (CPUs mostly idle) or on its own CPU work (cores pegged).
    # Only on whole nodes: on a shared node the other jobs' CPU use hides the job's.
    {"key": "input-stall-storage", "area": "data", "severity": "warning", "order": 13,
     "title": "Input stall: the data loader waits on the file system",
     "conditions": [*INPUT_STALL, ("node_cpu_share", ">=", 0.9), ("cpu_busy", "<=", 0.5),
                    ("fs_read_gbs", ">=", 0)],
     "text": "While the GPUs waited for input, the nodes' CPUs were only {cpu_busy} busy and "
             "network file systems delivered {fs_read_gbs} per node: the loader waits on "
             "storage, not on its own work.",
     "hint": "Compare that rate with what the file system should give one client; check "
             "the file system's load and the dataset's layout (many small files cost "
             "metadata round trips: pack them into shards), or stage the dataset to local "
             "NVMe."},
    # I/O wait: CPUs idle with disk or file-system I/O outstanding (node_exporter's iowait
    # mode). 10% of all CPUs over the whole run: healthy nodes sit near 0-2%, and a
    # checkpoint write or log flush, averaged over the run, stays well below; on a 32-CPU
    # node it takes three or four loader workers blocked on reads all the time. Whole nodes
    # only: another job's I/O would count too.
    {"key": "input-stall-iowait", "area": "data", "severity": "warning", "order": 14,
     "title": "Input stall: reads block on disk or file-system latency",
     "conditions": [*INPUT_STALL, ("node_cpu_share", ">=", 0.9), ("cpu_iowait", ">=", 0.1)],
     "text": "While the GPUs waited for input, the nodes' CPUs spent {cpu_iowait} of their "
             "time in I/O wait (idle with disk or file-system I/O outstanding; node_exporter "
             "counts it in the {cpu_busy} busy): the loader's reads most likely block on "
             "the latency of the local disk or the file system the dataset is on. It "
             "could also be the node swapping (memory pressure), the job's own checkpoint "
             "writes, or another job's or a daemon's I/O on the node.",
     "hint": "Check the device the dataset is read from (iostat -x: await and %util) and "
             "the node's swap activity (vmstat: si/so); stage the dataset to local NVMe or "
             "memory, read larger shards, and raise prefetch_factor and num_workers so "
             "reads overlap."},
    {"key": "input-stall-cpu", "area": "code", "severity": "warning", "order": 48,
     "title": "Input stall: preprocessing on the CPU cannot keep up",
     # CPUs pegged on whole nodes are host-side evidence by themselves: any PCIe receive
     # will do here, the network's included (the data path is busy either way).
     "conditions": [*WAITING, ("pcie_rx_gbs", ">=", 1.0), ("node_cpu_share", ">=", 0.9),
                    ("cpu_busy", ">=", 0.8)],
     "text": "While the GPUs waited for input, the nodes' CPUs were {cpu_busy} busy "
             "(network file-system reads: {fs_read_gbs} per node): decoding and augmenting "
             "batches on the CPU is the bottleneck, not the storage.",
     "hint": "Raise the DataLoader's num_workers to the cores Slurm gave the job "
             "(--cpus-per-task), decode on the GPU (NVIDIA DALI, torchvision.io's GPU "
             "decoder), or store the dataset pre-decoded."},
    {"key": "data-loading-dominant", "area": "data", "severity": "warning", "order": 11,
     "title": "Data loading takes a large share of each step",
     "conditions": [("trace", ">=", 1), ("trace_data_share", ">=", 0.25)],
     "text": "In the profiler trace, data loading takes {trace_data_share} of the average "
             "step.",
     "hint": "Check the data loader and the file system's throughput; prefetch batches "
             "while the GPU computes."},
    {"key": "slow-data-rank", "area": "data", "severity": "warning", "order": 12,
     "title": "One rank loads its data slowly and the others wait",
     "conditions": [("trace", ">=", 1), ("trace_straggler_data", ">=", 1)],
     "text": "Rank {trace_straggler_rank} spends {trace_excess_ms} more per step in data "
             "loading than the other ranks, which wait for it in every collective.",
     "hint": "Check that rank's node (local disk, CPU load) and its data shard."},
    {"key": "gpu-starved-trace", "area": "code", "severity": "warning", "order": 13,
     "title": "The GPU waits for the CPU (profiler trace)",
     "conditions": [("trace", ">=", 1), ("trace_gpu_idle", ">=", 0.3)],
     "text": "In the profiler trace the GPU is idle {trace_gpu_idle} of each step: the CPU "
             "side cannot feed it, whatever phase the CPU is in.",
     "hint": "Check launch and dispatch overhead (many small kernels: fuse them with "
             "torch.compile or capture CUDA graphs), synchronising calls (.item(), .cpu(), "
             "cudaStreamSynchronize, blocking host-device copies: pinned memory and "
             "non_blocking=True) and the input pipeline (DataLoader workers, pin_memory, "
             "prefetching)."},
    # --- Network: the network contact ---------------------------------------------------
    {"key": "allreduce-dominated", "area": "network", "severity": "warning", "order": 20,
     "title": "Steps dominated by communication",
     "conditions": [("sm_measured", ">=", 1), ("gpus", ">=", 2), ("busy", ">=", 0.5),
                    ("computing_share", "<=", 0.35), ("straggler_found", "<=", 0),
                    ("waiting_with_traffic", ">=", 0.8), ("pcie_rx_gbs", "<", 1.0)],
     "text": "GPUs were busy {busy} of the time but computing only {computing}; the waiting "
             "time coincided with NVLink/PCIe traffic ({waiting_with_traffic}) and no GPU "
             "was late: the collectives themselves take the time.",
     "hint": "Check the interconnect (NCCL_DEBUG=INFO for the transport used, InfiniBand "
             "port rates) and the message sizes (gradient bucket size, overlap)."},
    # The input stall's look-alike on multi-node jobs (issue 28): PCIe receive as high as
    # an input stall's, but the nodes' InfiniBand/RoCE ports received it (GPUDirect RDMA),
    # and the host's data path (CPUs, host copies) does not point at input.
    {"key": "communication-bound-gpudirect", "area": "network", "severity": "warning",
     "order": 19, "title": "Communication-bound: PCIe receive is network data (GPUDirect)",
     "conditions": [("multi_node", ">=", 1), *WAITING, ("pcie_rx_gbs", ">=", 1.0),
                    ("host_rx_gbs", "<", 1.0), ("cpu_busy", "<", 0.8)],
     "text": "GPUs were busy {busy} of the time but computing only {computing}. They received "
             "{pcie_rx_gbs} per GPU over PCIe, and the nodes' InfiniBand/RoCE ports "
             "received {ib_rx_gbs} per node, which explains {network_rx_share} of it: with "
             "GPUDirect RDMA the network card writes the collectives' data straight into "
             "GPU memory, and PCIe counts it. Host-to-GPU copies left: {host_rx_gbs} per "
             "GPU; the nodes' CPUs were {cpu_busy} busy (network file-system reads: "
             "{fs_read_gbs} per node). So the GPUs most likely wait on communication, not "
             "on input. It could also be input read over the network by a file system "
             "whose client counters are not collected, or another job's traffic on a "
             "shared node.",
     "hint": "Check the interconnect (NCCL_DEBUG=INFO for the transport and GPUDirect use, "
             "the InfiniBand ports' rates and errors), the message sizes (gradient bucket "
             "size) and the overlap of communication with compute; fewer, larger nodes "
             "or gradient accumulation send less per step."},
    {"key": "communication-bound-trace", "area": "network", "severity": "warning",
     "order": 21, "title": "Communication-bound (profiler trace)",
     "conditions": [("trace", ">=", 1), ("trace_comm_bound", ">=", 1)],
     "text": "Ranks are balanced but spend {trace_comm_share} of each step in collectives.",
     "hint": "Check the interconnect and the collective sizes; overlap communication with "
             "compute."},
    {"key": "ib-degraded", "area": "network", "severity": "critical", "order": 22,
     "title": "InfiniBand link running below its rate",
     "conditions": [("multi_node", ">=", 1), ("ib_degraded_nodes", ">=", 1)],
     "text": "{ib_degraded_node} has an InfiniBand port running well below its siblings' "
             "rate ({ib_degraded_nodes} node(s)); multi-node collectives run at the slowest "
             "link's speed.",
     "hint": "Check the port's negotiated rate (ibstat), the cable and the switch port."},
    {"key": "ib-errors", "area": "network", "severity": "warning", "order": 23,
     "title": "InfiniBand link errors",
     "conditions": [("multi_node", ">=", 1), ("ib_errors", ">=", 10)],
     "text": "The job's nodes counted {ib_errors} InfiniBand link error recoveries or downs.",
     "hint": "Check the links' error counters (perfquery) and the cabling."},
    {"key": "nvlink-degraded", "area": "network", "severity": "warning", "order": 24,
     "title": "NVLink traffic far below the peers'",
     "conditions": [("gpus", ">=", 2), ("nvlink_low_gpus", ">=", 1),
                    ("straggler_found", "<=", 0)],
     # Among the GPUs that ran: a GPU held but unused moves no NVLink data, and is the
     # idle-gpus finding's (issue 28).
     "text": "{nvlink_low_gpus} GPU(s) that ran ({nvlink_low_names}) moved far less NVLink "
             "data than the job's other running GPUs.",
     "hint": "Check nvidia-smi nvlink --status on the node (links down or degraded)."},
    # --- Hardware: hardware on-call -----------------------------------------------------
    {"key": "slow-gpu-hardware", "area": "hardware", "severity": "critical", "order": 30,
     "title": "A faulty GPU slows the whole job",
     "conditions": [("straggler_found", ">=", 1), ("straggler_hardware", ">=", 1)],
     "text": "GPU {straggler_gpu} made {waiting_gpu_count} GPUs wait (about "
             "{straggler_slowdown} more work per step) and shows {straggler_cause}.",
     "hint": "Drain the node, check the GPU (dcgmi diag -r 3, nvidia-smi -q for clocks, "
             "temperature and throttle reasons) and its cooling."},
    {"key": "xid", "area": "hardware", "severity": "critical", "order": 31,
     "title": "GPU hardware errors (XID)",
     "conditions": [("xid_gpus", ">=", 1)],
     "text": "{xid_gpus} GPU(s) reported XID {xid_codes} during the job.",
     "hint": "Check the node's kernel log for NVRM XID lines and run dcgmi diag; XID 48, "
             "63, 64, 74, 79, 92-95 point at the GPU, its memory or NVLink."},
    {"key": "ecc", "area": "hardware", "severity": "critical", "order": 32,
     "title": "Uncorrectable ECC errors",
     "conditions": [("ecc_dbe", ">=", 1)],
     "text": "The job's GPUs counted {ecc_dbe} uncorrectable (double-bit) ECC errors.",
     "hint": "Check row remapping (nvidia-smi -q -d ROW_REMAPPER) and retire the GPU if "
             "remapping failed."},
    {"key": "thermal-throttling", "area": "hardware", "severity": "warning", "order": 33,
     "title": "Thermal throttling",
     "conditions": [("thermal_share", ">=", 0.2), ("straggler_hardware", "<=", 0)],
     "text": "GPU {thermal_gpu} was thermally throttled {thermal_share} of the time "
             "(up to {temp_max}).",
     "hint": "Check the node's airflow, fans and inlet temperature."},
    {"key": "gpu-slow-across-jobs", "area": "hardware", "severity": "critical", "order": 34,
     "title": "The same GPU was the straggler in other jobs",
     "conditions": [("gpu_slow_elsewhere", ">=", 2)],
     "text": "GPU {slow_gpu} was also named the straggler in {gpu_slow_elsewhere} other "
             "jobs in the last 30 days.",
     "hint": "The GPU, not the code: drain the node and test the GPU."},
    # --- Code: the researcher, with the hint --------------------------------------------
    {"key": "straggler-no-hardware", "area": "code", "severity": "warning", "order": 40,
     # The busiest GPU at its software power limit lands here too: reaching the limit is
     # what its load does, not a fault (issue 28).
     "title": "The slowest stage: one GPU has more work than the others",
     "conditions": [("straggler_found", ">=", 1), ("straggler_hardware", "<=", 0)],
     "text": "GPU {straggler_gpu} is the slowest stage: {waiting_gpu_count} GPUs waited for "
             "it (about {straggler_slowdown} more work per step), and it shows no sign of a "
             "hardware problem ({straggler_cause}).",
     "hint": "Check for uneven work per rank: data shards of different sizes, extra work on "
             "one rank (logging, evaluation, checkpointing), or a pipeline stage that is "
             "heavier than the others. A profiler trace names the rank and phase."},
    {"key": "slow-compute-rank", "area": "code", "severity": "warning", "order": 41,
     "title": "One rank computes slower than the others (profiler trace)",
     "conditions": [("trace", ">=", 1), ("trace_straggler_compute", ">=", 1)],
     "text": "Rank {trace_straggler_rank} spends {trace_excess_ms} more per step in "
             "{trace_straggler_phase} than the other ranks.",
     "hint": "Check that rank's inputs (sequence lengths, batch composition) and its GPU."},
    {"key": "slow-optimizer-rank", "area": "code", "severity": "warning", "order": 42,
     "title": "One rank's optimizer step is slow (profiler trace)",
     "conditions": [("trace", ">=", 1), ("trace_straggler_optimizer", ">=", 1)],
     "text": "Rank {trace_straggler_rank} spends {trace_excess_ms} more per step in the "
             "optimizer than the other ranks.",
     "hint": "Check for per-rank extra work after backward (EMA, logging, gradient clipping "
             "on one rank only)."},
    {"key": "no-tensor-cores", "area": "code", "severity": "warning", "order": 43,
     "title": "Tensor cores unused",
     "conditions": [("computing", ">=", 0.3), ("tensor", "<=", 0.01)],
     "text": "The SMs were computing {computing} of the time but the tensor pipes were "
             "active {tensor}: the math runs in FP32 on the CUDA cores.",
     "hint": "Use mixed precision (torch.autocast with bf16) or allow TF32 "
             "(torch.backends.cuda.matmul.allow_tf32 = True)."},
    {"key": "low-occupancy", "area": "code", "severity": "info", "order": 44,
     "title": "Low SM occupancy",
     "conditions": [("computing", ">=", 0.5), ("occupancy", "<=", 0.1)],
     "text": "SMs were active {computing} of the time at only {occupancy} occupancy: kernels "
             "run too few warps to hide memory latency.",
     "hint": "Use larger batches, fuse small kernels (torch.compile), or check the kernel "
             "launch configuration."},
    {"key": "fp64", "area": "code", "severity": "warning", "order": 45,
     "title": "FP64 arithmetic in the job",
     "conditions": [("fp64", ">=", 0.05)],
     "text": "The FP64 pipes were active {fp64} of the time: double precision is many times "
             "slower on most AI GPUs.",
     "hint": "Look for float64 tensors (numpy arrays default to float64; torch.from_numpy "
             "keeps it) and cast them to float32 or bf16."},
    {"key": "idle-gpus", "area": "code", "severity": "warning", "order": 46,
     "title": "Some allocated GPUs stayed idle",
     "conditions": [("gpus", ">=", 2), ("idle_gpu_share", ">=", 0.25), ("busy", ">=", 0.1)],
     "text": "{idle_gpu_share} of the job's GPUs stayed idle ({idle_gpus}) while the others "
             "worked.",
     "hint": "Request only the GPUs the code uses, or check that every rank starts "
             "(torchrun --nproc-per-node, CUDA_VISIBLE_DEVICES)."},
    # The site's one reading of idleness (apps/analysis/idleness.py, settings IDLE_*): the
    # guardrails alert on the same reading, so a job flagged here is alerted while it runs.
    # Mostly idle (issue 19: busy 8 %, idle with memory held 92 % of 19.9 GPU-hours) is
    # above the idle line, so one job gets one finding.
    {"key": "idle-memory-held", "area": "code", "severity": "warning", "order": 49,
     "title": "Mostly idle, GPU memory held",
     "conditions": [("mostly_idle_held", ">=", 1)],
     "text": "The GPUs were busy only {busy} of the time over {run_hours} and sat idle with "
             "their memory held {held_idle} of it: the allocation kept GPUs from other jobs "
             "while they waited for work.",
     "hint": "For interactive work, shut the kernel down (not only the browser tab) when "
             "you step away, ask for a shorter --time, or use a GPU slice (MIG or shards) "
             "for exploration; batch the heavy work as a job."},
    {"key": "idle-allocation", "area": "code", "severity": "warning", "order": 47,
     "title": "GPUs held but unused",
     "conditions": [("idle_job", ">=", 1)],
     "text": "The GPUs were busy {busy} of the time over {run_hours}: the allocation was "
             "held without being used.",
     "hint": "End idle sessions (notebooks) and request GPUs when the work is ready; a "
             "shorter time limit frees them for others."},
]
