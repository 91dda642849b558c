#!/bin/bash
# Beacon Slurm Prolog: tell dcgm-exporter which job holds which GPU.
#
# slurmd runs this as root on every allocated node at allocation time (PrologFlags=Alloc).
# It writes what `dcgm-exporter --hpc-job-mapping-dir DIR` reads: one file per GPU, named by
# the node-local physical GPU index (DCGM's numbering, the `gpu` label), one job id per line.
# dcgm-exporter then labels that GPU's series hpc_job="<id>" (one series per id when shared).
#
# Settings (optional) come from /etc/slurm/beacon-jobmap.conf, KEY=value lines:
#   JOBMAP_DIR=/run/dcgm-job-map   the directory given to --hpc-job-mapping-dir
#   JOBMAP_PER_NODE=no             yes: one sub-directory per slurmd node name (only for
#                                  several emulated nodes on one host, as the dev cluster does)
#   JOBMAP_LOG=                    an absolute path: append "<epoch> start <job> <node> <gpus>
#                                  [<uuids>]" lines (the epilog appends "end"), Beacon's GPU
#                                  history; the UUIDs (same order as the indices, "-" when
#                                  unknown) come from nvidia-smi when it is there
#   NVIDIA_SMI=nvidia-smi          an absolute path to use another nvidia-smi (the dev cluster's
#                                  emulated GPUs have a stand-in)
#   SCONTROL=auto                  where the GPU indices come from. Slurm hands the prolog
#                                  SLURM_JOB_GPUS, which holds only the LAST GPU model's indices
#                                  when a job holds two models on one node (--gres=gpu:h100:1,
#                                  gpu:h200:2 gave "2,3" for IDX 0 and 2-3: seen on 22.05.8,
#                                  24.11.5 and 26.05.5). auto: ask `scontrol -d show job` (one
#                                  call, 10 s at most) when this node has several GPU models in
#                                  slurm's gres.conf; yes: always; no: never; or an absolute path
#                                  to scontrol (used as auto). SLURM_JOB_GPUS is the fallback.
# The file is parsed, never sourced, so a stray line cannot run code as root.
#
# It always exits 0: a failing prolog drains the node and requeues the job held, which is far
# worse than a GPU without a job label.
CONF=${BEACON_JOBMAP_CONF:-/etc/slurm/beacon-jobmap.conf}
JOBMAP_DIR=/run/dcgm-job-map
JOBMAP_PER_NODE=no
JOBMAP_LOG=
NVIDIA_SMI=nvidia-smi
SCONTROL=auto
if [[ -r "$CONF" ]]; then
  while IFS='=' read -r key value; do
    case "$key" in
      JOBMAP_DIR) [[ "$value" == /* ]] && JOBMAP_DIR=$value ;;
      JOBMAP_PER_NODE) JOBMAP_PER_NODE=$value ;;
      JOBMAP_LOG) [[ "$value" == /* ]] && JOBMAP_LOG=$value ;;
      NVIDIA_SMI) [[ "$value" == /* ]] && NVIDIA_SMI=$value ;;
      SCONTROL) [[ "$value" == /* || "$value" =~ ^(auto|yes|no)$ ]] && SCONTROL=$value ;;
    esac
  done < "$CONF"
fi
dir=$JOBMAP_DIR
[[ "$JOBMAP_PER_NODE" == yes ]] && dir="$dir/${SLURMD_NODENAME:-$(hostname -s)}"
job=${SLURM_JOB_ID:-}
[[ "$job" =~ ^[0-9]+$ ]] || exit 0
mkdir -p "$dir" 2>/dev/null && chmod 0755 "$dir" 2>/dev/null || exit 0

node=${SLURMD_NODENAME:-$(hostname -s)}

# "0,1,5" or "0-3" to one index per line
expand_indices() {
  local part
  IFS=',' read -ra parts <<< "$1"
  for part in "${parts[@]}"; do
    if [[ "$part" =~ ^[0-9]+$ ]]; then echo "$part"
    elif [[ "$part" =~ ^([0-9]+)-([0-9]+)$ ]]; then seq "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
    fi
  done
}

# Does slurm's gres.conf give this node GPUs of more than one Type? (Lines naming other nodes
# through host lists count too: a false "yes" costs one scontrol call, a false "no" the bug.)
several_models() {
  local conf=${SLURM_CONF:-/etc/slurm/slurm.conf}
  conf="${conf%/*}/gres.conf"
  [[ -r "$conf" ]] || return 1
  [[ $(grep -iE '^[^#]*Name=gpu' "$conf" | grep -oiE 'Type=[^ ]+' | sort -u | wc -l) -gt 1 ]]
}

# This node's indices from the scheduler: `scontrol -d show job` prints, per node group,
# "Nodes=gpu[01-02] CPU_IDs=... GRES=gpu:h100:1(IDX:0),gpu:h200:2(IDX:2-3)".
scheduler_indices() {
  local cmd=scontrol line nodes gres members
  [[ "$SCONTROL" == /* ]] && cmd=$SCONTROL
  command -v "$cmd" >/dev/null 2>&1 || return 1
  while read -r line; do
    [[ "$line" =~ Nodes=([^[:space:]]+).*GRES=([^[:space:]]+) ]] || continue
    nodes=${BASH_REMATCH[1]} gres=${BASH_REMATCH[2]}
    if [[ "$nodes" != "$node" ]]; then
      members=$(timeout 10 "$cmd" show hostnames "$nodes" 2>/dev/null) || continue
      grep -qx "$node" <<< "$members" || continue
    fi
    grep -oE 'gpu[^,(]*\(IDX:[0-9,-]+\)' <<< "$gres" | sed -E 's/.*IDX:([0-9,-]+)\)/\1/' |
      while read -r ids; do expand_indices "$ids"; done
  done < <(timeout 10 "$cmd" -d show job "$job" 2>/dev/null)
}

# The job's GPU indices on this node, once per prolog run (sorted, unique).
gpu_indices_now() {
  local found=""
  if [[ "$SCONTROL" != no ]] && { [[ "$SCONTROL" == yes ]] || several_models; }; then
    found=$(scheduler_indices | sort -un)
  fi
  [[ -n "$found" ]] || found=$(expand_indices "${SLURM_JOB_GPUS:-}" | sort -un)
  echo "$found"
}
INDICES=$(gpu_indices_now)
gpu_indices() { [[ -n "$INDICES" ]] && echo "$INDICES"; return 0; }

# The UUID of each GPU index, in the same order, "-" where unknown; nothing without nvidia-smi.
gpu_uuids() {
  local map g uuid out=() known=0
  command -v "$NVIDIA_SMI" >/dev/null 2>&1 || return 0
  map=$(timeout 10 "$NVIDIA_SMI" --query-gpu=index,uuid --format=csv,noheader 2>/dev/null) || return 0
  for g in $(gpu_indices); do
    uuid=$(awk -F', *' -v i="$g" '$1 == i { print $2; exit }' <<< "$map")
    if [[ "$uuid" =~ ^GPU-[0-9A-Fa-f-]{8,60}$ ]]; then out+=("$uuid"); known=1; else out+=(-); fi
  done
  [[ "$known" == 1 ]] && (IFS=,; echo "${out[*]}")
  return 0
}

# One lock per directory: the epilog of one job and the prolog of another may touch the same
# GPU file at once (shared GPUs, back-to-back jobs). The lock file's name is not an integer, so
# dcgm-exporter ignores it.
(
  flock -w 20 9 || exit 0
  for g in $(gpu_indices); do
    grep -qsx "$job" "$dir/$g" || echo "$job" >> "$dir/$g"
  done
  # Optional history for Beacon (JOBMAP_LOG): which GPUs a job held from when, kept after the
  # job ends, so telemetry without an hpc_job label can still be bound to jobs.
  gpus=$(gpu_indices | paste -sd, -)
  if [[ -n "$JOBMAP_LOG" && -n "$gpus" ]]; then
    line="$(date +%s) start $job $node $gpus $(gpu_uuids)"
    echo "${line% }" >> "$JOBMAP_LOG"
  fi
) 9> "$dir/.lock"
exit 0
