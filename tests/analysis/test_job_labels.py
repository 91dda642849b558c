"""AI-aware labels from batch scripts: the shipped rules on a table of scripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.analysis.job_labels import match_labels, rules_from_dict

ROOT = Path(__file__).resolve().parents[2]
RULES = rules_from_dict(json.loads((ROOT / "apps/jobs/label_rules.json").read_text()))

MEGATRON = """#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
export DATA_PATH=/datasets/c4/en
srun torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d \\
  pretrain_gpt.py --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 \\
  --data-path /datasets/c4/en --save /checkpoints/gpt-13b --load /checkpoints/gpt-13b
"""
DEEPSPEED = """#!/bin/bash
#SBATCH -N 4
deepspeed --num_nodes 4 --num_gpus 8 train.py --deepspeed ds_config_zero3.json \\
    --dataset_name /lustre/data/pile --output_dir /lustre/ckpt/run7
"""
ACCELERATE = """#!/bin/bash
#SBATCH --gpus-per-node=h100:4
accelerate launch --num_machines 1 --num_processes 4 finetune.py \\
  --train_data_path=s3://bucket/sft.jsonl --checkpoint-dir "/scratch/ckpt"
"""
JAX = """#!/bin/bash
#SBATCH --nodes=8
export XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true
srun python -m maxtext.train base_output_directory=gs://x dataset_path=gs://y
"""
COMMENTED = """#!/bin/bash
# torchrun --nnodes=16 pretrain_gpt.py --tensor-model-parallel-size 8
python eval.py
"""
WRAP = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\nsleep 30\n"


@pytest.mark.parametrize(("script", "expected"), [
    (MEGATRON, {"launcher": "torchrun", "framework": "megatron-lm", "nodes": 2,
                "procs_per_node": 8, "tensor_parallel": 4, "pipeline_parallel": 2,
                "datasets": ["/datasets/c4/en"], "checkpoints": ["/checkpoints/gpt-13b"]}),
    (DEEPSPEED, {"launcher": "deepspeed", "framework": "deepspeed", "nodes": 4,
                 "procs_per_node": 8, "datasets": ["/lustre/data/pile"],
                 "checkpoints": ["/lustre/ckpt/run7"]}),
    (ACCELERATE, {"launcher": "accelerate", "framework": "accelerate", "nodes": 1,
                  "procs_per_node": 4, "datasets": ["s3://bucket/sft.jsonl"],
                  "checkpoints": ["/scratch/ckpt"]}),
    (JAX, {"launcher": "srun", "framework": "jax", "nodes": 8}),
    (COMMENTED, {}),
    (WRAP, {}),
])
def test_labels_from_scripts(script, expected):
    # a script without #SBATCH --output writes to Slurm's default: "" says so
    assert match_labels(script, RULES) == {**expected, "stdout": "", "rules": RULES.version}


def test_no_script_gives_no_labels_not_even_the_default_output():
    assert match_labels("", RULES) == {"rules": RULES.version}


@pytest.mark.parametrize(("lines", "stdout", "stderr"), [
    ("#SBATCH --output=%x-%j.out", "%x-%j.out", None),
    ("#SBATCH -o /scratch/%u/%j.log\n#SBATCH -e /scratch/%u/%j.err", "/scratch/%u/%j.log",
     "/scratch/%u/%j.err"),
    ("#SBATCH --output \"/home/me/my logs/%j.out\"\n#SBATCH --error='err-%j'",
     "/home/me/my logs/%j.out", "err-%j"),
    ("#SBATCH -o%j.out", "%j.out", None),
    ("#SBATCH --open-mode=append\n#SBATCH --exclusive", "", None),  # neither is -o / -e
    ("# SBATCH --output=ignored.out\necho", "", None),  # not an sbatch line
])
def test_the_scripts_output_lines_are_labels(lines, stdout, stderr):
    labels = match_labels(f"#!/bin/bash\n{lines}\npython train.py\n", RULES)
    assert labels["stdout"] == stdout and labels.get("stderr") == stderr


def test_only_a_text_rule_takes_a_default():
    with pytest.raises(ValueError, match="only a text rule"):
        rules_from_dict({"version": 1, "labels": [{"name": "x", "kind": "int", "default": "1"}]})


def test_a_huge_hostile_script_is_bounded():
    script = "torchrun " + "--data-path /x " * 200_000
    labels = match_labels(script, RULES)
    assert labels["launcher"] == "torchrun" and labels["datasets"] == ["/x"]


@pytest.mark.parametrize(("data", "message"), [
    ({}, "'version' must be an integer"),
    ({"version": 1, "labels": [{"name": "x", "kind": "magic"}]}, "label rule #0"),
    ({"version": 1, "labels": [{"name": "x", "kind": "int", "patterns": [{"regex": "("}]}]},
     "label rule 'x' pattern #0"),
])
def test_bad_rules_name_the_rule(data, message):
    with pytest.raises(ValueError, match=message):
        rules_from_dict(data)
