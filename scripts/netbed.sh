#!/usr/bin/env bash
# The shaped-network test bed (issue 7): runs one command inside a fresh network
# namespace whose loopback is rate-limited with a tbf qdisc, with Open MPI told
# to carry all MPI traffic over TCP on that loopback. dtrain's ranks then talk
# through a real, rate-limited network path instead of shared memory.
#
#   scripts/netbed.sh [--rate RATE] [--burst B] [--latency L] [--] command args...
#   scripts/netbed.sh --rate 100mbit -- build/dtrain bench allreduce -n 2
#
# Needs root and iproute2 (ip, tc). Only the namespace's own loopback is ever
# configured (every ip/tc call names the namespace with -n); the namespace, its
# qdisc and any process left in it are removed on every exit path. The command's
# exit status is passed through; refusals exit 2 with one line. docs/TESTBED.md
# says what the bed models and what it does not.
set -u

me=netbed
usage="usage: scripts/netbed.sh [--rate RATE] [--burst B] [--latency L] [--] command args...
  --rate RATE     loopback bandwidth, tc syntax: 100mbit, 1gbit, 500kbit [1gbit]
  --burst B       token-bucket size, tc syntax: 256kb (kilobytes), 1mb [256kb];
                  more than one loopback packet (65550 B, plus 1 KiB of slack)
  --latency L     longest a packet may wait in the queue before it is dropped [50ms]
The command runs as root inside a fresh network namespace whose only interface is lo,
shaped with 'tc qdisc add dev lo root tbf rate RATE burst B latency L', with
OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_pml=ob1 exported,
so MPI ranks started inside (dtrain -n N, mpirun) talk over the shaped loopback.
All traffic of the namespace shares one RATE: docs/TESTBED.md."

refuse() { echo "$me: $*" >&2; exit 2; }

rate=1gbit burst=256kb latency=50ms
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) echo "$usage"; exit 0 ;;
    --rate|--burst|--latency)
      [ $# -ge 2 ] || refuse "$1 needs a value (see --help)"
      case $1 in --rate) rate=$2 ;; --burst) burst=$2 ;; --latency) latency=$2 ;; esac
      shift 2 ;;
    --rate=*) rate=${1#*=}; shift ;;
    --burst=*) burst=${1#*=}; shift ;;
    --latency=*) latency=${1#*=}; shift ;;
    --) shift; break ;;
    -*) refuse "unknown flag '$1' (see --help)" ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || refuse "no command to run (see --help)"

# tc's own units, checked here so that a typo is one clear line before anything
# is created (tc would also take a bare number, in bits/s or bytes: ambiguous).
shopt -s nocasematch
if [[ ! $rate =~ ^[0-9]+([.][0-9]+)?([kmgt]i?)?(bit|bps)$ ]] || [[ $rate =~ ^0*([.]0*)?[a-z]+$ ]]; then
  refuse "--rate expects a positive tc rate like 100mbit, 1gbit, 500kbit; got '$rate'"
fi
[[ $burst =~ ^[0-9]+([kmg](b|bit)?|b)?$ ]] ||
  refuse "--burst expects a tc size like 256kb, 1mb, 300000; got '$burst'"
[[ $latency =~ ^[0-9]+([.][0-9]+)?(s|sec|secs|ms|msec|msecs|us|usec|usecs)$ ]] ||
  refuse "--latency expects a tc time like 50ms, 1s; got '$latency'"
shopt -u nocasematch

[ "$(id -u)" -eq 0 ] || refuse "must run as root: it creates a network namespace and a tc qdisc (try: sudo $0 ...)"
for tool in ip tc; do
  command -v $tool >/dev/null || refuse "'$tool' not found: install Debian's iproute2 (apt-get install iproute2)"
done
command -v -- "$1" >/dev/null || { echo "$me: command not found: $1" >&2; exit 127; }

ns=dtrain-bed-$$
child=
# Everything in our namespace was started by us: end it, then drop the namespace
# (the qdisc and lo go with it). Runs once, on every exit path.
# shellcheck disable=SC2317  # (runs from a trap)
cleanup() {
  trap '' INT TERM HUP   # a second Ctrl-C must not cut the cleanup short
  trap - EXIT
  [ -n "$ns_made" ] || return 0
  local pids i
  for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -z "$pids" ] && break
    # shellcheck disable=SC2086
    if [ "$i" -lt 20 ]; then kill -TERM $pids 2>/dev/null; else kill -KILL $pids 2>/dev/null; fi
    sleep 0.1
  done
  ip netns delete "$ns" 2>/dev/null || echo "$me: could not delete namespace $ns: run 'ip netns delete $ns'" >&2
}
# shellcheck disable=SC2317
on_signal() {
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  exit $((128 + $1))   # the EXIT trap cleans up
}
ns_made=
trap cleanup EXIT
trap 'on_signal 2' INT
trap 'on_signal 15' TERM
trap 'on_signal 1' HUP

err=$(ip netns add "$ns" 2>&1) || refuse "cannot create network namespace $ns: ${err//$'\n'/ }"
ns_made=1
err=$(ip -n "$ns" link set lo up 2>&1) || refuse "cannot bring up lo in $ns: ${err//$'\n'/ }"
err=$(tc -n "$ns" qdisc add dev lo root tbf rate "$rate" burst "$burst" latency "$latency" 2>&1) ||
  refuse "tc refused 'tbf rate $rate burst $burst latency $latency' (is sch_tbf available?): ${err//$'\n'/ }"

# A packet longer than the bucket can never be sent: tbf drops it and TCP stalls
# for good. Compare the burst tc stored (bytes) with lo's largest frame.
mtu=$(ip -n "$ns" -o link show lo | sed -n 's/.* mtu \([0-9]*\).*/\1/p')
stored=$(tc -n "$ns" -j qdisc show dev lo | sed -n 's/.*"burst":\([0-9]*\).*/\1/p')
if [ -z "$mtu" ] || [ -z "$stored" ]; then refuse "cannot read back lo's MTU or the tbf burst in $ns"; fi
# At exactly one packet the kernel's rounding of the bucket starves TCP (seen: a
# sixth of the rate), hence 1 KiB of slack.
[ "$stored" -ge $((mtu + 14 + 1024)) ] ||
  refuse "tbf at --rate $rate --burst $burst keeps a bucket of $stored B, not above one loopback packet ($((mtu + 14)) B + 1 KiB of slack): full-size packets would be dropped or starve; use --burst 128kb or more (tc stores the bucket as time, which very low or high rates shrink)"

# MPI over TCP on this loopback only: tcp,self leaves out shared memory (vader);
# btl_tcp_if_exclude's default (127.0.0.1/8) would leave tcp without an
# interface, so include lo (the two are exclusive: drop an inherited exclude);
# pml ob1 because the ucx/cm pmls bypass the BTLs with transports of their own.
unset OMPI_MCA_btl_tcp_if_exclude
export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_pml=ob1
export DTRAIN_NETBED="$ns rate=$rate burst=$burst latency=$latency"
echo "$me: $ns: lo shaped to $rate (burst $burst, latency $latency); MPI over TCP on lo" >&2

# In the background so that a signal reaches our trap at once (a foreground child
# would delay it until the child ends); stdin stays the caller's, and Ctrl-C its
# default meaning (a shell without job control starts background commands with
# SIGINT and SIGQUIT ignored; env --default-signal, coreutils >= 9, undoes that).
reset=()
env --default-signal=INT,QUIT true 2>/dev/null && reset=(env "--default-signal=INT,QUIT")
"${reset[@]}" ip netns exec "$ns" "$@" <&0 &
child=$!
wait "$child"
rc=$?
child=
exit $rc
