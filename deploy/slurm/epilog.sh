#!/bin/bash
# Beacon Slurm Epilog: remove this job's id from the GPU files that prolog.sh wrote.
#
# Same settings file as prolog.sh (/etc/slurm/beacon-jobmap.conf). A file left empty is removed,
# so an idle GPU has no file and dcgm-exporter drops its hpc_job label. Always exits 0: a failing
# epilog drains the node.
CONF=${BEACON_JOBMAP_CONF:-/etc/slurm/beacon-jobmap.conf}
JOBMAP_DIR=/run/dcgm-job-map
JOBMAP_PER_NODE=no
JOBMAP_LOG=
if [[ -r "$CONF" ]]; then
  while IFS='=' read -r key value; do
    case "$key" in
      JOBMAP_DIR) [[ "$value" == /* ]] && JOBMAP_DIR=$value ;;
      JOBMAP_PER_NODE) JOBMAP_PER_NODE=$value ;;
      JOBMAP_LOG) [[ "$value" == /* ]] && JOBMAP_LOG=$value ;;
    esac
  done < "$CONF"
fi
dir=$JOBMAP_DIR
[[ "$JOBMAP_PER_NODE" == yes ]] && dir="$dir/${SLURMD_NODENAME:-$(hostname -s)}"
job=${SLURM_JOB_ID:-}
[[ "$job" =~ ^[0-9]+$ && -d "$dir" ]] || exit 0

(
  flock -w 20 9 || exit 0
  # Every GPU file, not only SLURM_JOB_GPUS: a requeued or resized job must not leave a stale
  # id behind on a GPU it no longer holds.
  released=()
  for f in "$dir"/*; do
    [[ -f "$f" && "${f##*/}" =~ ^[0-9]+$ ]] || continue
    grep -qsx "$job" "$f" || continue
    grep -vx "$job" "$f" > "$f.tmp.$$" || true
    if [[ -s "$f.tmp.$$" ]]; then mv -f "$f.tmp.$$" "$f"; else rm -f "$f" "$f.tmp.$$"; fi
    released+=("${f##*/}")
  done
  if [[ -n "$JOBMAP_LOG" && ${#released[@]} -gt 0 ]]; then
    gpus=$(IFS=,; echo "${released[*]}")
    echo "$(date +%s) end $job ${SLURMD_NODENAME:-$(hostname -s)} $gpus" >> "$JOBMAP_LOG"
  fi
) 9> "$dir/.lock"
exit 0
