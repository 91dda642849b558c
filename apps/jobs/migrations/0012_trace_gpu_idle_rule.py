"""The GPU-idle facts of a trace analysis (its GPU timeline) and the rule that reads them:
a GPU idle most of each step is starved by its CPU.

The seed adds shipped rules a database lacks and leaves the admins' edits alone (the same
step as 0005's).
"""

import importlib

from django.db import migrations, models


def seed_new_rules(apps, schema_editor):
    importlib.import_module("apps.jobs.migrations.0005_job_page").seed_rules(apps, schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0011_job_memory_peak'),
    ]

    operations = [
        migrations.AlterField(
            model_name='diagnosiscondition',
            name='fact',
            field=models.CharField(choices=[('gpus', 'gpus — GPUs with telemetry'), ('run_hours', 'run_hours — run time'), ('sm_measured', 'sm_measured — SM activity measured'), ('busy', 'busy — GPU busy (utilisation)'), ('computing', 'computing — SM active (computing)'), ('computing_share', 'computing_share — computing share of busy time'), ('waiting', 'waiting — busy but not computing'), ('idle', 'idle — idle (memory held or no process)'), ('tensor', 'tensor — tensor pipe active'), ('occupancy', 'occupancy — SM occupancy'), ('fp64', 'fp64 — FP64 pipe active'), ('idle_gpu_share', 'idle_gpu_share — share of GPUs left idle'), ('waiting_with_traffic', 'waiting_with_traffic — waiting time with NVLink/PCIe traffic'), ('pcie_rx_gbs', 'pcie_rx_gbs — host-to-GPU copies (PCIe receive) per GPU'), ('straggler_found', 'straggler_found — straggler GPU named'), ('straggler_slowdown', "straggler_slowdown — straggler's extra work per step"), ('straggler_hardware', 'straggler_hardware — hardware evidence on the straggler'), ('waiting_gpu_count', 'waiting_gpu_count — GPUs that waited for it'), ('xid_gpus', 'xid_gpus — GPUs with hardware XIDs'), ('ecc_dbe', 'ecc_dbe — uncorrectable ECC errors'), ('ecc_sbe', 'ecc_sbe — correctable ECC errors'), ('thermal_share', "thermal_share — worst GPU's time thermally throttled"), ('temp_max', 'temp_max — hottest GPU temperature'), ('gpu_slow_elsewhere', 'gpu_slow_elsewhere — other recent jobs where this GPU was the straggler'), ('nvlink_low_gpus', 'nvlink_low_gpus — GPUs with far less NVLink traffic than their peers'), ('multi_node', 'multi_node — runs on several nodes'), ('nodes', 'nodes — nodes'), ('ib_degraded_nodes', 'ib_degraded_nodes — nodes with a downgraded InfiniBand link'), ('ib_errors', 'ib_errors — InfiniBand link errors'), ('ib_wait_per_s', 'ib_wait_per_s — InfiniBand transmit waits per second (worst node)'), ('node_cpu_share', "node_cpu_share — share of its nodes' CPUs the job held"), ('cpu_busy', 'cpu_busy — CPU busy (busiest node)'), ('fs_read_gbs', 'fs_read_gbs — network file-system reads per node'), ('trace', 'trace — profiler trace analysed'), ('trace_data_share', 'trace_data_share — data loading share of the step'), ('trace_comm_share', 'trace_comm_share — communication share of the step'), ('trace_comm_bound', 'trace_comm_bound — communication-bound (balanced ranks)'), ('trace_straggler_data', 'trace_straggler_data — straggler rank slow in data loading'), ('trace_straggler_compute', 'trace_straggler_compute — straggler rank slow in compute'), ('trace_straggler_optimizer', 'trace_straggler_optimizer — straggler rank slow in the optimizer'), ('trace_excess_ms', "trace_excess_ms — straggler rank's extra work per step"), ('trace_gpu_idle', 'trace_gpu_idle — GPU idle share of each step (trace)')], max_length=64),
        ),
        migrations.RunPython(seed_new_rules, migrations.RunPython.noop),
    ]
