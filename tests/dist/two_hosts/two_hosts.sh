#!/usr/bin/env bash
# Runs one MPI job across two "hosts" made of two network namespaces of this machine, the way
# mpirun runs a job across two machines: a hostfile names the hosts, mpirun (on the first host)
# starts the second host's daemon through plm_rsh_agent (an agent script that enters the
# namespace, in place of ssh), and the ranks talk over TCP on the veth pair between the
# namespaces (btl tcp,self; oob and btl restricted to that subnet).
#
#   two_hosts.sh [--per-host N] [--timeout S] [-x VAR]... [--mca K V]... [--host-dirs PATH A B]
#                -- PROGRAM [ARGS...]
#
# --per-host N  ranks on each host (default 1): the job has 2N ranks, 0..N-1 on host a.
# --timeout S   seconds the job may take (default 120); then mpirun is ended (TERM, KILL 5 s later).
# -x VAR        exported to every rank (mpirun -x): the second host's daemon starts with a clean
#               environment (PATH, HOME and LANG only), as over ssh, so a rank there sees only the
#               variables mpirun forwards. Repeatable.
# --mca K V     an extra MCA parameter for mpirun. Repeatable.
# --host-dirs PATH A B  the directory PATH (it must exist) shows directory A on host a and B on
#               host b, as two machines' local disks (bind mounts inside the hosts' namespaces).
#
# Each host is a network namespace (its own address, 10.254.0.1 and .2 on a veth pair between the
# two), entered with its own UTS namespace (hostname tessera-host-a / -b, which
# MPI_Get_processor_name reports) and mount namespace (ip netns exec makes one) in which the
# run's hosts file is bind-mounted over /etc/hosts: the machine's /etc/hosts and /etc/netns are
# not touched. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), iproute2, util-linux (unshare, mount)
# and Open MPI's mpirun; when one is missing it says so and exits 77 (ctest: skipped).
# Teardown runs on every exit (success, failure, timeout, INT, TERM): mpirun is ended, processes
# left in the namespaces are ended by pid, the namespaces (and with them the veths and the
# mounts) and the work directory are removed, and the teardown checks that none is left (exit 3
# if one is). A run killed outright (KILL) leaves them; the next run removes them.
# Exit status: the job's (mpirun's), 124 on timeout, 2 on bad usage, 3 on a failed setup or a
# leftover, 77 when this machine can not run it.
set -euo pipefail

per_host=1
timeout_s=120
exports=()
mcas=()
host_path=
dir_a=
dir_b=
usage() {
  sed -n '8,18p' "$0" >&2
  exit 2
}
while (($#)); do
  case "$1" in
    --per-host) per_host="${2:?--per-host needs a value}"; shift 2 ;;
    --timeout) timeout_s="${2:?--timeout needs a value}"; shift 2 ;;
    -x) exports+=(-x "${2:?-x needs a variable name}"); shift 2 ;;
    --mca) mcas+=(--mca "${2:?--mca needs a key}" "${3:?--mca needs a value}"); shift 3 ;;
    --host-dirs)
      host_path="${2:?--host-dirs needs PATH A B}"; dir_a="${3:?--host-dirs needs PATH A B}"
      dir_b="${4:?--host-dirs needs PATH A B}"; shift 4
      for d in "$host_path" "$dir_a" "$dir_b"; do
        [[ -d "$d" ]] || { echo "two_hosts.sh: --host-dirs: '$d' is not a directory" >&2; exit 2; }
      done
      host_path="$(realpath "$host_path")"; dir_a="$(realpath "$dir_a")"; dir_b="$(realpath "$dir_b")" ;;
    --) shift; break ;;
    *) echo "two_hosts.sh: unknown option '$1'" >&2; usage ;;
  esac
done
(($#)) || { echo "two_hosts.sh: no program given" >&2; usage; }
[[ "$per_host" =~ ^[1-9][0-9]?$ ]] || { echo "two_hosts.sh: --per-host '$per_host' is not 1..99" >&2; exit 2; }
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || { echo "two_hosts.sh: --timeout '$timeout_s' is not a positive integer" >&2; exit 2; }

skip() { echo "two_hosts.sh: skipped: $*" >&2; exit 77; }
[[ $(id -u) == 0 ]] || skip "needs root to create network namespaces (CI runs as root)"
for tool in ip unshare mount mpirun timeout; do
  command -v "$tool" >/dev/null || skip "'$tool' not found (apt-get install iproute2 util-linux openmpi-bin)"
done
# Namespaces must be creatable and enterable here (a container without CAP_SYS_ADMIN, or a chroot
# whose / is not a mount point, can not): probe with a throwaway one, and say why when not.
probe_ns="tsr2hp$$"
if ! probe_err="$( { ip netns add "$probe_ns" && ip netns exec "$probe_ns" true; } 2>&1)"; then
  ip netns del "$probe_ns" 2>/dev/null || true
  skip "network namespaces can not be made or entered here: ${probe_err:-no reason given}"
fi
ip netns del "$probe_ns" 2>/dev/null || true
# The sanitizers' settings reach the second host too (its daemon starts from a clean environment).
for var in ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS ASAN_SYMBOLIZER_PATH; do
  [[ -z "${!var:-}" ]] || exports+=(-x "$var")
done
program="$1"
[[ "$program" == */* ]] || program="$(command -v "$program")" || { echo "two_hosts.sh: '$1' not found" >&2; exit 2; }
program="$(realpath "$program")"
shift

# Names unique to this run (the pid), so that runs in parallel (ctest -j) do not meet. Addresses
# live inside the namespaces only, so parallel runs may use the same ones.
tag="tsr2h$$"
ns_a="${tag}a"
ns_b="${tag}b"
host_a=tessera-host-a
host_b=tessera-host-b
addr_a=10.254.0.1
addr_b=10.254.0.2
subnet=10.254.0.0/24
tmp_base="${TMPDIR:-/tmp}"
work=
job=

# Ends the processes still in namespace $1 by pid (TERM, then KILL after 3 s).
end_processes() {
  local pids
  pids="$(ip netns pids "$1" 2>/dev/null || true)"
  [[ -n "$pids" ]] || return 0
  echo "two_hosts.sh: ending processes left in $1:" $pids >&2
  kill -TERM $pids 2>/dev/null || true
  for _ in 1 2 3 4 5 6; do
    sleep 0.5
    pids="$(ip netns pids "$1" 2>/dev/null || true)"
    [[ -n "$pids" ]] || return 0
  done
  kill -KILL $pids 2>/dev/null || true
  sleep 0.2
}

teardown() {
  local status=$? left=()
  trap - EXIT INT TERM
  if [[ -n "$job" ]]; then  # timeout(1) passes the TERM on to mpirun, which ends the job
    kill -TERM "$job" 2>/dev/null || true
    for _ in $(seq 20); do
      kill -0 "$job" 2>/dev/null || break
      sleep 0.5
    done
    kill -KILL "$job" 2>/dev/null || true
  fi
  for ns in "$ns_a" "$ns_b"; do
    if [[ -e "/run/netns/$ns" ]]; then
      end_processes "$ns"
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  [[ -z "$work" ]] || rm -rf "$work"
  # Must be gone: the namespaces (the veths were made inside them and go with them), any link
  # named after this run in this namespace, the work directory.
  for ns in "$ns_a" "$ns_b"; do
    ip netns list 2>/dev/null | grep -qw "$ns" && left+=("namespace $ns")
  done
  ip -o link show 2>/dev/null | grep -q "$tag" && left+=("a link named $tag*")
  [[ -n "$work" && -e "$work" ]] && left+=("$work")
  if ((${#left[@]})); then
    echo "two_hosts.sh: teardown left: ${left[*]}" >&2
    ((status)) || status=3
  fi
  exit "$status"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# What an earlier run killed outright (KILL runs no teardown) left is removed once that run is gone.
for stale in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^tsr2h[0-9]+[ab]$' || true); do
  pid="${stale#tsr2h}"
  pid="${pid%[ab]}"
  kill -0 "$pid" 2>/dev/null && continue
  echo "two_hosts.sh: removing $stale, left by an ended run (pid $pid)" >&2
  end_processes "$stale"
  ip netns del "$stale" 2>/dev/null || true
  rm -rf "$tmp_base/tessera-two-hosts-tsr2h$pid".*
done

fail_setup() { echo "two_hosts.sh: setup failed: $*" >&2; exit 3; }
work="$(mktemp -d "$tmp_base/tessera-two-hosts-$tag.XXXXXX")"
ip netns add "$ns_a" || fail_setup "ip netns add $ns_a"
ip netns add "$ns_b" || fail_setup "ip netns add $ns_b"
ip link add "${tag}v0" netns "$ns_a" type veth peer name "${tag}v1" netns "$ns_b" ||
  fail_setup "a veth pair between $ns_a and $ns_b"
ip -n "$ns_a" addr add "$addr_a/24" dev "${tag}v0" || fail_setup "address $addr_a"
ip -n "$ns_b" addr add "$addr_b/24" dev "${tag}v1" || fail_setup "address $addr_b"
for link in "$ns_a lo" "$ns_b lo" "$ns_a ${tag}v0" "$ns_b ${tag}v1"; do
  ip -n ${link% *} link set "${link#* }" up || fail_setup "link ${link#* } up in ${link% *}"
done
printf '127.0.0.1\tlocalhost\n%s\t%s\n%s\t%s\n' "$addr_a" "$host_a" "$addr_b" "$host_b" >"$work/hosts"

# enter HOST COMMAND...: runs COMMAND on HOST (its network namespace, its hostname, its hosts file).
cat >"$work/enter" <<EOF
#!/bin/sh
case "\$1" in
  $host_a|$addr_a) ns=$ns_a; name=$host_a; dir="$dir_a" ;;
  $host_b|$addr_b) ns=$ns_b; name=$host_b; dir="$dir_b" ;;
  *) echo "two_hosts.sh: no host '\$1' here ($host_a, $host_b)" >&2; exit 255 ;;
esac
shift
exec ip netns exec "\$ns" unshare --uts sh -c \\
  'mount --bind "$work/hosts" /etc/hosts && { [ -z "\$1" ] || mount --bind "\$1" "$host_path"; } &&
   hostname "\$0" && shift && exec "\$@"' "\$name" "\$dir" "\$@"
EOF
# The agent, called by mpirun as it calls ssh ("agent [OPTIONS] HOST COMMAND..."): runs COMMAND
# with sh on HOST, from a clean login-like environment as ssh would.
cat >"$work/agent" <<EOF
#!/bin/sh
while [ "\$#" -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host="\$1"
shift
exec "$work/enter" "\$host" env -i PATH="$PATH" HOME="${HOME:-/root}" LANG="${LANG:-C.UTF-8}" \\
  sh -c "\$*"
EOF
chmod +x "$work/enter" "$work/agent"
printf '%s slots=%s\n%s slots=%s\n' "$host_a" "$per_host" "$host_b" "$per_host" >"$work/hostfile"
mkdir "$work/tmp"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_args=(-np $((2 * per_host)) --hostfile "$work/hostfile" --bind-to none
             --mca plm_rsh_agent "$work/agent" --mca plm_rsh_no_tree_spawn 1
             --mca pml ob1 --mca btl "tcp,self"
             --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet"
             --mca orte_tmpdir_base "$work/tmp"
             "${exports[@]}" "${mcas[@]}")
echo "two_hosts.sh: $host_a=$addr_a ($ns_a), $host_b=$addr_b ($ns_b):" \
  "mpirun ${mpirun_args[*]} $program $*" >&2
# In the background, so that a signal to this script runs the teardown at once (bash defers traps
# while a foreground command runs).
timeout -k 5 "$timeout_s" "$work/enter" "$host_a" mpirun "${mpirun_args[@]}" "$program" "$@" &
job=$!
set +e
wait "$job"
status=$?
set -e
job=
((status == 124)) && echo "two_hosts.sh: the job ran past ${timeout_s}s and was ended" >&2
exit "$status"
