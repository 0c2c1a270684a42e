#!/usr/bin/env bash
# scripts/cluster.sh: an emulated cluster on this machine (issue 12). Each host
# is a network namespace plus a UTS namespace (host name nodeK), joined by a veth
# pair to a bridge in a switch namespace; every link is shaped in both
# directions with tc tbf. Nothing of the cluster exists in the machine's own
# network namespace: no route, NAT or bridge to it (`up` checks that).
#
#   scripts/cluster.sh up [--hosts N] [--slots S] [--rate RATE] [--slurm]
#   scripts/cluster.sh exec HOST CMD...     run CMD on HOST (node1.., or head)
#   scripts/cluster.sh status | env | hostfile
#   scripts/cluster.sh link HOST down|up|rate RATE
#   scripts/cluster.sh kill HOST [--wipe]   HOST dies: link down, every process
#                                           SIGKILLed (--wipe: its local disk too)
#   scripts/cluster.sh boot HOST            a dead HOST comes back (link up, empty)
#   scripts/cluster.sh freeze|thaw HOST     HOST hangs: link down + SIGSTOP, and back
#   scripts/cluster.sh skew HOST OFFSET     HOST's wall clock OFFSET off (+30s; 0: back)
#   scripts/cluster.sh down                 remove everything (idempotent)
#
# State lives in $DTRAIN_CLUSTER_DIR (default /run/dtrain-cluster): the host
# file, the rsh agent Open MPI uses to start a host's daemon inside its
# namespaces, `env` (the MCA settings that keep MPI's TCP on the cluster links
# and shared memory inside a host), local/ (where each host sees its own local
# disk, hosts/nodeK/local: a bind mount in the host's commands' own mount
# namespaces), shared/ (the network file system), slurm/ and munge/.
# Refusals exit 2 with one line. docs/CLUSTER.md is the user's guide.
set -u
me=cluster
refuse() { echo "$me: $*" >&2; exit 2; }
state=${DTRAIN_CLUSTER_DIR:-/run/dtrain-cluster}
P=dtc-               # namespace prefix: dtc-sw, dtc-node1 ...
FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1
NET=10.77.0          # the cluster's only network; head (the switch) is .254

usage="usage: scripts/cluster.sh up [--hosts N] [--slots S] [--rate RATE] [--slurm]
       scripts/cluster.sh exec HOST CMD... | status | env | hostfile | down
       scripts/cluster.sh link HOST down|up|rate RATE | kill HOST [--wipe] | boot HOST | freeze HOST | thaw HOST
       scripts/cluster.sh skew HOST OFFSET
  --hosts N     hosts node1..nodeN, 1 to 8 [2]
  --slots S     MPI slots per host in the host file, 1 to 64 [2]
  --rate RATE   every host's link, both directions, tc syntax (100mbit, 1gbit, 10gbit) [1gbit]
  --slurm       also start munge, slurmctld (on head) and one slurmd per host
HOST is node1..nodeN, or head (the switch's namespace, where slurmctld runs).
There is no --latency: this kernel has no netem, so links are shaped in rate only."

# ---- helpers ----------------------------------------------------------------
# rate_bits RATE: bits per second of a tc rate (100mbit, 1gbit, 500kbit, 1mbps)
rate_bits() {
  local r=${1,,} n unit
  [[ $r =~ ^([0-9]+)(k|m|g|t)?(bit|bps)$ ]] || return 1
  n=${BASH_REMATCH[1]}; unit=${BASH_REMATCH[2]}
  [ "$n" -gt 0 ] || return 1
  case $unit in k) n=$((n * 1000)) ;; m) n=$((n * 1000000)) ;; g) n=$((n * 1000000000)) ;; t) n=$((n * 1000000000000)) ;; esac
  [ "${BASH_REMATCH[3]}" = bps ] && n=$((n * 8))
  echo "$n"
}
# shape NS DEV RATE: tbf on DEV's egress; the bucket holds 2 ms at RATE, at least
# 16 KiB (ten frames). A bucket that does not scale with the rate lets a message
# the size of the bucket cross free after an idle gap: 256 KiB is 21 ms at 100
# Mbit/s, which made a pipeline's activations look free (docs/BENCHMARKS.md).
shape() {
  local bits burst
  bits=$(rate_bits "$3") || refuse "--rate expects a tc rate like 100mbit, 1gbit, 10gbit; got '$3'"
  burst=$((bits / 8 / 500)); [ "$burst" -lt 16384 ] && burst=16384
  tc -n "$1" qdisc replace dev "$2" root tbf rate "$3" burst "$burst" latency 100ms 2>&1
}
hosts_up() { cat "$state/nhosts" 2>/dev/null; }
need_up() { [ -f "$state/nhosts" ] || refuse "no cluster is up (state $state): run scripts/cluster.sh up"; }
# check_host H: H names a host of the running cluster (nodeK or head)
check_host() {
  local n; n=$(hosts_up)
  [ "$1" = head ] && return 0
  [[ $1 =~ ^node([1-9])$ ]] && [ "${BASH_REMATCH[1]}" -le "$n" ] || refuse "no host '$1' in this cluster: node1..node$n or head"
}
ns_of() { [ "$1" = head ] && echo "${P}sw" || echo "$P$1"; }
port_of() { echo "p${1#node}"; }
# in_host H CMD...: CMD inside H's network and UTS namespaces, with the cluster's env
in_host() {
  local h=$1; shift
  # shellcheck disable=SC1091
  source "$state/env"
  [ "$h" = head ] && exec ip netns exec "$(ns_of "$h")" nsenter --uts="$state/uts/$h" -- "$@"
  [ -f "$state/skew/$h" ] && export FAKETIME="$(cat "$state/skew/$h")" LD_PRELOAD=$FAKETIME_LIB
  # ip netns exec gives the command a mount namespace of its own: the host's
  # local disk appears at $state/local there, and to no other host.
  exec ip netns exec "$(ns_of "$h")" nsenter --uts="$state/uts/$h" -- \
    /bin/sh -c 'mount --bind "$1" "$2" || exit 1; shift 2; exec "$@"' sh "$state/hosts/$h/local" "$state/local" "$@"
}
# host_pids H: every process in H's network namespace
host_pids() { ip netns pids "$(ns_of "$1")" 2>/dev/null; }
# kill_host H SIG: SIG to every process of H until none is left (SIGKILL), or once
kill_host() {
  local pids i
  for i in $(seq 1 50); do
    pids=$(host_pids "$1")
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    [ "$2" = KILL ] && kill -CONT $pids 2>/dev/null; kill "-$2" $pids 2>/dev/null
    [ "$2" = KILL ] || return 0
    sleep 0.05
  done
  echo "$me: processes of $1 survived SIGKILL: $(host_pids "$1" | tr '\n' ' ')" >&2
  return 1
}
# What a host that died leaves behind on this machine, whose /tmp and /dev/shm
# the emulated hosts share: Open MPI's session directories and shared-memory
# segments, and the checkpoint replicas dtrain held in that host's memory.
clean_ompi() { rm -rf /tmp/ompi."$1".* /dev/shm/vader_segment."$1".* /dev/shm/dtrain-ckpt-"$1"-* 2>/dev/null; }

# ---- down -------------------------------------------------------------------
cmd_down() {
  local ns h
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$P"); do
    h=${ns#"$P"}; [ "$h" = sw ] && h=head
    kill_host "$h" KILL
    ip netns delete "$ns" 2>/dev/null || echo "$me: could not delete namespace $ns: run 'ip netns delete $ns'" >&2
    clean_ompi "$h"
  done
  if [ -d "$state" ]; then
    for f in "$state"/uts/*; do [ -e "$f" ] && umount "$f" 2>/dev/null; done
    rm -rf "$state"
  fi
  rm -rf /etc/netns/"$P"* 2>/dev/null
  return 0
}

# ---- up ---------------------------------------------------------------------
# The cluster speaks IPv4 only: a link brought back up would otherwise hold a
# tentative IPv6 address for a second or two, and MPI, which may pick it,
# fails to connect meanwhile.
ipv4_only() {
  ip netns exec "$1" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6' 2>/dev/null
  return 0
}

# isolated: every namespace holds only the cluster's own links and routes, and
# the machine's namespace holds none of them
isolated() {
  local n=$1 k links routes want
  for k in $(seq 1 "$n"); do
    links=$(ip -n "${P}node$k" -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' ')
    [ "$links" = "cl0 lo " ] || { echo "node$k has links: $links"; return 1; }
    routes=$(ip -n "${P}node$k" route show | tr '\n' ';')
    [ "$routes" = "$NET.0/24 dev cl0 proto kernel scope link src $NET.$k ;" ] || { echo "node$k has routes: $routes"; return 1; }
    [ "$(ip netns exec "${P}node$k" cat /proc/sys/net/ipv4/ip_forward)" = 0 ] || { echo "node$k forwards"; return 1; }
  done
  want="br0 lo $(for k in $(seq 1 "$n"); do printf 'p%d ' "$k"; done | tr ' ' '\n' | sort | tr '\n' ' ')"
  links=$(ip -n "${P}sw" -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' ')
  [ "$(echo "$links" | tr ' ' '\n' | sort | tr '\n' ' ')" = "$(echo "$want" | tr ' ' '\n' | sort | tr '\n' ' ')" ] || { echo "the switch has links: $links"; return 1; }
  [ "$(ip -n "${P}sw" route show | grep -vc "^$NET.0/24 dev br0")" = 0 ] || { echo "the switch has routes: $(ip -n "${P}sw" route show | tr '\n' ';')"; return 1; }
  if ip -o link show | awk -F': ' '{print $2}' | grep -Eq '^(cl0|br0|p[0-9]+)(@|$)'; then
    echo "the machine's own namespace holds a cluster link"; return 1
  fi
  ip -o addr show | grep -q " $NET\." && { echo "the machine's own namespace has a $NET.x address"; return 1; }
  return 0
}

cmd_up() {
  local n=2 slots=2 rate=1gbit slurm=0 k err
  while [ $# -gt 0 ]; do
    case $1 in
      --hosts|--slots|--rate)
        [ $# -ge 2 ] || refuse "$1 needs a value (see --help)"
        case $1 in --hosts) n=$2 ;; --slots) slots=$2 ;; --rate) rate=$2 ;; esac; shift 2 ;;
      --hosts=*) n=${1#*=}; shift ;;
      --slots=*) slots=${1#*=}; shift ;;
      --rate=*) rate=${1#*=}; shift ;;
      --slurm) slurm=1; shift ;;
      --latency|--latency=*) refuse "--latency cannot be emulated here: this kernel has no netem (links are shaped in rate only, with tbf)" ;;
      *) refuse "unknown flag '$1' for up (see --help)" ;;
    esac
  done
  [[ $n =~ ^[1-8]$ ]] || refuse "--hosts expects 1 to 8, got '$n'"
  [[ $slots =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] && [ "$slots" -le 64 ] || refuse "--slots expects 1 to 64, got '$slots'"
  rate_bits "$rate" > /dev/null || refuse "--rate expects a tc rate like 100mbit, 1gbit, 10gbit; got '$rate'"
  [ "$(id -u)" -eq 0 ] || refuse "must run as root: it creates network and UTS namespaces (try: sudo $0 up)"
  for tool in ip tc unshare nsenter; do
    command -v $tool > /dev/null || refuse "'$tool' not found: install Debian's iproute2 and util-linux"
  done
  [ -f "$state/nhosts" ] && refuse "a cluster is already up (state $state): scripts/cluster.sh down first"
  if [ "$slurm" = 1 ]; then
    for tool in slurmctld slurmd munged sinfo; do
      command -v $tool > /dev/null || refuse "'$tool' not found: --slurm needs Debian's slurm-wlm and munge (apt-get install slurm-wlm munge)"
    done
  fi
  cmd_down
  trap 'cmd_down' EXIT
  trap 'exit 130' INT TERM HUP
  mkdir -p "$state"/uts "$state"/shared "$state"/local && chmod 755 "$state" || refuse "cannot create $state"
  err=$(ip netns add "${P}sw" 2>&1) || refuse "cannot create a network namespace (are namespaces available here?): ${err//$'\n'/ }"
  # ip enters a namespace with a mount namespace of its own, which needs / to be
  # a mount point: in a plain chroot it is not.
  err=$(ip -n "${P}sw" link show lo 2>&1 >/dev/null) ||
    refuse "ip cannot enter a network namespace here (${err//$'\n'/ }): / must be a mount point (a chroot is not enough; use a VM or a container)"
  ipv4_only "${P}sw"
  touch "$state/uts/head"
  err=$(unshare --uts="$state/uts/head" hostname head 2>&1) || refuse "cannot create a UTS namespace: ${err//$'\n'/ }"
  err=$({
    ip -n "${P}sw" link set lo up &&
    ip -n "${P}sw" link add br0 type bridge &&
    ip -n "${P}sw" addr add "$NET.254/24" dev br0 &&
    ip -n "${P}sw" link set br0 up
  } 2>&1) || refuse "cannot build the switch in ${P}sw (is the bridge driver available?): ${err//$'\n'/ }"
  for k in $(seq 1 "$n"); do
    local h=node$k
    ip netns add "$P$h" && ipv4_only "$P$h" && ip -n "$P$h" link set lo up &&
      ip -n "${P}sw" link add "p$k" type veth peer name cl0 netns "$P$h" &&
      ip -n "${P}sw" link set "p$k" master br0 up &&
      ip -n "$P$h" addr add "$NET.$k/24" dev cl0 &&
      ip -n "$P$h" link set cl0 up || refuse "cannot create host $h (veth pairs and namespaces: see the lines above)"
    err=$(shape "$P$h" cl0 "$rate") && err=$(shape "${P}sw" "p$k" "$rate") ||
      refuse "tc refused tbf at $rate on $h's link (is sch_tbf available?): ${err//$'\n'/ }"
    touch "$state/uts/$h"
    unshare --uts="$state/uts/$h" hostname "$h" || refuse "cannot create the UTS namespace of $h"
    mkdir -p "$state/hosts/$h/local" "$state/hosts/$h/tmp"
  done
  # Names inside the cluster come from its own hosts file; an empty
  # resolv.conf means nothing inside ever asks a resolver.
  for ns in sw $(seq -f 'node%g' 1 "$n"); do
    mkdir -p "/etc/netns/$P$ns"
    { echo "127.0.0.1 localhost"; echo "$NET.254 head"; for k in $(seq 1 "$n"); do echo "$NET.$k node$k"; done; } > "/etc/netns/$P$ns/hosts"
    : > "/etc/netns/$P$ns/resolv.conf"
  done
  err=$(isolated "$n") || refuse "the cluster is not isolated from this machine's network: $err"
  for k in $(seq 1 "$n"); do echo "node$k slots=$slots"; done > "$state/hostfile"
  write_agent
  echo "$rate" > "$state/rate"
  if [ "$slurm" = 1 ]; then start_slurm "$n" "$slots" || exit 2; fi
  echo "$n" > "$state/nhosts"
  trap - EXIT INT TERM HUP
  echo "$me: $n hosts x $slots slots, links $rate (tbf, both directions), network $NET.0/24$([ "$slurm" = 1 ] && echo ", Slurm up"); state $state" >&2
  echo "$state/hostfile"
}

# The rsh agent Open MPI calls as `AGENT [options] HOST COMMAND...`, and the
# environment every command of the cluster gets.
write_agent() {
  cat > "$state/rsh" <<EOF
#!/bin/sh
# Open MPI's rsh agent for the emulated cluster: skip the options, take the
# host name, run the command line inside that host's namespaces.
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
h=\$1
case \$h in node[1-9]) ;; *) echo "cluster rsh: no host '\$h' in this cluster" >&2; exit 255 ;; esac
# as ssh would find it: a host whose link is down (dead, frozen, cut off) does not answer
ip -n ${P}sw -o link show "p\${h#node}" 2>/dev/null | grep -q ',UP' ||
  { echo "cluster rsh: connect to host \$h: No route to host (its link is down)" >&2; exit 255; }
shift
# a host whose clock is skewed (scripts/cluster.sh skew): libfaketime for its commands
[ -f "$state/skew/\$h" ] && export FAKETIME="\$(cat "$state/skew/\$h")" LD_PRELOAD=$FAKETIME_LIB
# the host's local disk at $state/local, in this command's own mount namespace
exec ip netns exec "$P\$h" nsenter --uts="$state/uts/\$h" -- \\
  /bin/sh -c 'mount --bind "\$1" "\$2" || exit 1; shift 2; exec /bin/sh -c "\$*"' sh "$state/hosts/\$h/local" "$state/local" "\$@"
EOF
  chmod 755 "$state/rsh"
  cat > "$state/env" <<EOF
# The emulated cluster's environment (scripts/cluster.sh): Open MPI starts
# remote daemons through the rsh agent, carries TCP on the cluster link cl0
# only, and shared memory inside a host.
export DTRAIN_CLUSTER_DIR=$state
export OMPI_MCA_plm_rsh_agent=$state/rsh
export OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=cl0
export OMPI_MCA_oob_tcp_if_include=cl0
unset OMPI_MCA_btl_tcp_if_exclude OMPI_MCA_oob_tcp_if_exclude
EOF
}

# ---- Slurm ------------------------------------------------------------------
# munged (its socket on the shared state dir) and slurmctld run on head, one
# slurmd per host; settings this kernel and Debian's packages need are in
# docs/CLUSTER.md.
start_slurm() {
  local n=$1 slots=$2 s=$state/slurm m=$state/munge k
  mkdir -p "$s/ctld" "$m" && chmod 700 "$m"
  dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none && chmod 400 "$m/munge.key"
  ip netns exec "${P}sw" nsenter --uts="$state/uts/head" -- munged --force --socket="$m/munge.socket" --key-file="$m/munge.key" \
    --pid-file="$m/munged.pid" --log-file="$m/munged.log" --seed-file="$m/munge.seed" 2>> "$m/munged.log" ||
    { echo "$me: munged did not start: $(tail -2 "$m/munged.log" 2>/dev/null)" >&2; return 1; }
  {
    echo "ClusterName=dtrain"
    echo "SlurmctldHost=head($NET.254)"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$m/munge.socket"
    echo "StateSaveLocation=$s/ctld"
    echo "SlurmctldPidFile=$s/slurmctld.pid"
    echo "SlurmctldLogFile=$s/slurmctld.log"
    echo "SlurmdSpoolDir=$s/%n/spool"
    echo "SlurmdPidFile=$s/%n/slurmd.pid"
    echo "SlurmdLogFile=$s/%n/slurmd.log"
    echo "TmpFS=$state/hosts/%n/tmp"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "SlurmdTimeout=10"
    echo "MinJobAge=600"
    echo "KillWait=10"
    echo "MailProg=/bin/true"
    for k in $(seq 1 "$n"); do echo "NodeName=node$k NodeAddr=$NET.$k CPUs=$slots State=UNKNOWN"; done
    echo "PartitionName=main Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP"
  } > "$s/slurm.conf"
  echo "CgroupPlugin=cgroup/v1" > "$s/cgroup.conf"
  echo "export SLURM_CONF=$s/slurm.conf" >> "$state/env"
  export SLURM_CONF=$s/slurm.conf
  ip netns exec "${P}sw" nsenter --uts="$state/uts/head" -- setsid slurmctld -D -f "$s/slurm.conf" > "$s/slurmctld.out" 2>&1 < /dev/null &
  for k in $(seq 1 "$n"); do
    mkdir -p "$s/node$k/spool"
    ip netns exec "${P}node$k" nsenter --uts="$state/uts/node$k" -- setsid slurmd -D -N "node$k" -f "$s/slurm.conf" > "$s/node$k/slurmd.out" 2>&1 < /dev/null &
  done
  for k in $(seq 1 200); do
    [ "$(ip netns exec "${P}sw" sinfo -h -t idle -o '%D' 2>/dev/null | awk '{s += $1} END {print s + 0}')" = "$n" ] && return 0
    sleep 0.1
  done
  echo "$me: Slurm did not bring $n nodes to idle in 20 s: $(ip netns exec "${P}sw" sinfo 2>&1 | tr '\n' ';'); logs in $s" >&2
  return 1
}

# ---- the other commands ----------------------------------------------------------
cmd_status() {
  need_up
  local n k h rx tx
  n=$(hosts_up)
  echo "cluster: $n hosts, state $state, network $NET.0/24"
  for k in $(seq 1 "$n"); do
    h=node$k
    rx=$(ip netns exec "$P$h" cat /sys/class/net/cl0/statistics/rx_bytes 2>/dev/null)
    tx=$(ip netns exec "$P$h" cat /sys/class/net/cl0/statistics/tx_bytes 2>/dev/null)
    printf '%-6s %s  link %-4s  rate %-8s  %3d processes  cl0 rx %s B tx %s B\n' "$h" "$NET.$k" \
      "$(ip -n "${P}sw" -o link show "p$k" | grep -q 'state UP\|,UP' && echo up || echo down)" \
      "$(tc -n "$P$h" qdisc show dev cl0 | sed -n 's/.* rate \([^ ]*\).*/\1/p')" \
      "$(host_pids "$h" | wc -l)" "$rx" "$tx"
  done
  if [ -n "$(grep SLURM_CONF "$state/env" 2>/dev/null)" ]; then
    # shellcheck disable=SC1091
    source "$state/env"; ip netns exec "${P}sw" sinfo 2>&1
  fi
}

cmd_link() {
  need_up; [ $# -ge 2 ] || refuse "usage: link HOST down|up|rate RATE"
  check_host "$1"; [ "$1" = head ] && refuse "head is the switch: take a host's link down instead"
  local h=$1 p err; p=$(port_of "$1")
  case $2 in
    down) ip -n "${P}sw" link set "$p" down ;;
    up) ip -n "${P}sw" link set "$p" up ;;
    rate)
      [ $# -ge 3 ] || refuse "link $h rate needs a RATE"
      rate_bits "$3" > /dev/null || refuse "rate expects a tc rate like 100mbit, 1gbit, 10gbit; got '$3'"
      err=$(shape "$P$h" cl0 "$3") && err=$(shape "${P}sw" "$p" "$3") || refuse "tc refused rate $3: $err" ;;
    *) refuse "link $h: expected down, up or rate RATE, got '$2'" ;;
  esac
}

main() {
  [ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
  local cmd=$1; shift
  case $cmd in
    -h|--help|help) echo "$usage" ;;
    up) cmd_up "$@" ;;
    down) [ "$(id -u)" -eq 0 ] || refuse "must run as root"; cmd_down ;;
    status) cmd_status ;;
    env) need_up; cat "$state/env" ;;
    hostfile) need_up; echo "$state/hostfile" ;;
    exec)
      need_up; [ $# -ge 2 ] || refuse "usage: exec HOST CMD..."
      check_host "$1"; in_host "$@" ;;
    link) cmd_link "$@" ;;
    kill)
      # The link goes first, so that no reset from the dying sockets leaves:
      # a host that loses power sends nothing.
      need_up; [ $# -ge 1 ] || refuse "usage: kill HOST [--wipe]"; check_host "$1"
      [ "$1" = head ] && refuse "head is the switch; kill a host"
      [ $# -ge 2 ] && [ "$2" != --wipe ] && refuse "kill $1: unknown flag '$2'"
      cmd_link "$1" down; kill_host "$1" KILL; clean_ompi "$1"
      [ "${2:-}" = --wipe ] && { rm -rf "$state/hosts/$1/local" && mkdir -p "$state/hosts/$1/local"; }
      return 0 ;;
    boot)
      # A booted host starts with an empty neighbour table, and its first
      # (gratuitous) ARP refreshes its peers' entries for it.
      need_up; [ $# -eq 1 ] || refuse "usage: boot HOST"; check_host "$1"
      [ "$1" = head ] && refuse "head is the switch; boot a host"
      kill_host "$1" KILL; clean_ompi "$1"; cmd_link "$1" up
      ip -n "$P$1" neigh flush dev cl0 2>/dev/null
      for k in $(seq 1 "$(hosts_up)"); do
        [ "node$k" = "$1" ] || ip -n "${P}node$k" neigh del "$NET.${1#node}" dev cl0 2>/dev/null
      done
      return 0 ;;
    skew)
      # Another wall clock on HOST (libfaketime: Debian's faketime package) for
      # the commands started there from now on; 'skew HOST 0' takes it back.
      need_up; [ $# -eq 2 ] || refuse "usage: skew HOST OFFSET (+30s, -2m, 0)"; check_host "$1"
      [ -f "$FAKETIME_LIB" ] || refuse "skew needs libfaketime: apt-get install faketime"
      [[ $2 =~ ^(0|[-+][0-9]+[smhd]?)$ ]] || refuse "skew $1: OFFSET expects +30s, -2m, +1h or 0, got '$2'"
      mkdir -p "$state/skew"
      if [ "$2" = 0 ]; then rm -f "$state/skew/$1"; else echo "$2" > "$state/skew/$1"; fi ;;
    freeze)
      need_up; [ $# -eq 1 ] || refuse "usage: freeze HOST"; check_host "$1"
      cmd_link "$1" down; kill_host "$1" STOP ;;
    thaw)
      need_up; [ $# -eq 1 ] || refuse "usage: thaw HOST"; check_host "$1"
      kill_host "$1" CONT; cmd_link "$1" up ;;
    *) refuse "unknown command '$cmd' (see --help)" ;;
  esac
}
main "$@"
