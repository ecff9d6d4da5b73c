#!/bin/sh
# toolkit: the Slurm view for Prometheus, written for node exporter's textfile
# collector on the Slurm controller. Arguments: TENANT=GUARANTEED_GPUS ...
# Node states and reasons from sinfo, jobs and GPUs per tenant (Slurm account) from
# squeue; written to a temporary file in the same directory, then renamed, so node
# exporter never reads half a file (it ignores names not ending in .prom).
set -eu
dir=${TOOLKIT_TEXTFILE_DIR:-/var/lib/prometheus/node-exporter}
out="$dir/toolkit_slurm.prom"
tmp="$out.$$"
trap 'rm -f "$tmp"' EXIT
nodes=$(sinfo -h -N -o '%N|%T|%G|%E')
running=$(squeue -h -t R -o '%a|%D|%b')
pending=$(squeue -h -t PD -o '%a|%D|%b')
{
  printf '%s\n' "$nodes" | awk -F'|' '
    function esc(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return s }
    BEGIN {
      print "# HELP slurm_node_state_info Slurm state of each node (sinfo %T), always 1."
      print "# TYPE slurm_node_state_info gauge"
    }
    NF >= 2 && !seen[$1]++ {
      print "slurm_node_state_info{node=\"" esc($1) "\",state=\"" esc($2) "\"} 1"
      # The reason is last: a `|` in it stays in it.
      r = $4; for (i = 5; i <= NF; i++) r = r "|" $i
      if (r != "" && r != "none") reason[$1] = r
      # GPUs of the node: the counts of its gpu GRES (gpu:h100:8(S:0-1) -> 8).
      g = 0; m = split($3, parts, ",")
      for (i = 1; i <= m; i++) if (parts[i] ~ /^gpu/) { sub(/\(.*/, "", parts[i]); k = split(parts[i], f, ":"); if (f[k] ~ /^[0-9]+$/) g += f[k] }
      gpus[$1] = g
    }
    END {
      print "# HELP slurm_node_gpus GPUs of each node (sinfo %G), for the GPU-hours lost."
      print "# TYPE slurm_node_gpus gauge"
      for (node in gpus) print "slurm_node_gpus{node=\"" esc(node) "\"} " gpus[node]
      print "# HELP slurm_node_reason_info Reason a node is drained or down (sinfo %E), always 1."
      print "# TYPE slurm_node_reason_info gauge"
      for (node in reason) print "slurm_node_reason_info{node=\"" esc(node) "\",reason=\"" esc(reason[node]) "\"} 1"
    }'
  # GPUs of a job: nodes x the count after "gpu" in its per-node GRES
  # (gres:gpu:4, gres/gpu:h100:4); a job without GPUs counts 0.
  for state in running pending; do
    if [ "$state" = running ]; then jobs=$running; else jobs=$pending; fi
    printf '%s\n' "$jobs" | awk -F'|' -v state="$state" -v tenants="$*" '
      function esc(s) { gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); return s }
      BEGIN { n = split(tenants, list, " "); for (i = 1; i <= n; i++) { split(list[i], kv, "="); gpus[kv[1]] = 0; jobs[kv[1]] = 0 } }
      NF >= 2 {
        count = 0; m = split($3, parts, ",")
        for (i = 1; i <= m; i++) if (parts[i] ~ /gpu/) { k = split(parts[i], f, /[:=\/]/); if (f[k] ~ /^[0-9]+$/) count += f[k] }
        gpus[$1] += count * $2; jobs[$1] += 1
      }
      END {
        name = (state == "running") ? "used" : "pending"
        print "# HELP toolkit_tenant_gpus_" name " GPUs of the tenant'"'"'s " state " jobs."
        print "# TYPE toolkit_tenant_gpus_" name " gauge"
        for (t in gpus) print "toolkit_tenant_gpus_" name "{tenant=\"" esc(t) "\"} " gpus[t]
        print "# HELP slurm_queue_jobs_" state " Jobs " state " per account."
        print "# TYPE slurm_queue_jobs_" state " gauge"
        for (t in jobs) print "slurm_queue_jobs_" state "{tenant=\"" esc(t) "\"} " jobs[t]
      }'
  done
  printf '# HELP toolkit_tenant_gpus_guaranteed GPUs the blueprint guarantees the tenant.\n'
  printf '# TYPE toolkit_tenant_gpus_guaranteed gauge\n'
  for pair in "$@"; do
    printf 'toolkit_tenant_gpus_guaranteed{tenant="%s"} %s\n' "${pair%%=*}" "${pair#*=}"
  done
  printf '# HELP toolkit_slurm_view_last_run_timestamp_seconds When the Slurm view was last written.\n'
  printf '# TYPE toolkit_slurm_view_last_run_timestamp_seconds gauge\n'
  printf 'toolkit_slurm_view_last_run_timestamp_seconds %s\n' "$(date +%s)"
} > "$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
