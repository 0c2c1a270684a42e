#!/usr/bin/env bash
# ZeRO-3 (issue 20), side by side on this machine.
# Speed: W2 (gpt defaults, batch 16 x 128 tokens, AdamW) at -n 2 under ZeRO-3,
# at the default buckets (4 MiB: W2 makes 3, and the pair in use with the
# tied embedding's is the whole model) and at --bucket-mb 1 (a layer a bucket:
# half the model gathered at most), against ZeRO-2, interleaved for ROUNDS
# rounds: each round's throughput ratio, and ZeRO-3's gather time and the part
# of it the step waited for (the end-of-run memory line's gather_s,
# gather_exposed_s; per step).
# Memory: a GPT of 16 layers x 512 (52M parameters) at -n 4 under ZeRO 0-3:
# every rank's peak resident set (ru_maxrss) against dtrain's own count, and
# the model states (parameters + gradients + AdamW's two moments) against the
# ZeRO paper's formula for fp32 training, (4 + 4 + 8) P sharded as each stage
# shards (Rajbhandari et al. 2020, sec. 5): ZeRO-3's working set of gathered
# buckets is reported beside it.
# Usage: bench/zero3.sh [BUILD_DIR] [ROUNDS]     (about 5 minutes on 2 cores at 5 rounds)
set -u
build=$(cd "${1:-build}" && pwd) || exit 2
rounds=${2:-5}
dt="$build/dtrain"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
export OPENBLAS_NUM_THREADS=1

W2="--model gpt --batch 16 --steps 12 --warmup 2 --eval-max 1 --log-every 1000 --quiet"
ips() { grep -o '"items_per_s":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
field() { grep '"memory"' "$1/metrics.jsonl" | grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2; }

grep -m1 'model name' /proc/cpuinfo | sed 's/.*: /# CPU: /'
echo "# flags: $(grep -o -w 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')$(nproc) cores"
echo
echo "## W2 at -n 2: ZeRO-3 against ZeRO-2 ($rounds interleaved rounds)"
echo "# dtrain train -n 2 --zero 2|3 $W2"
echo
echo "| round | ZeRO-2 tokens/s | ZeRO-3 tokens/s | ratio | gathers s/step | exposed s/step | ZeRO-3 --bucket-mb 1 tokens/s | ratio | gathers s/step | exposed s/step |"
echo "|---|---|---|---|---|---|---|---|---|---|"
ratios="" ratios1=""
for r in $(seq "$rounds"); do
  for v in "2" "3" "3 --bucket-mb 1"; do
    o="$tmp/z${v// /}"
    rm -rf "$o"
    # shellcheck disable=SC2086
    "$dt" train -n 2 --zero $v $W2 --out "$o" > "$o.log" 2>&1 || { echo "run failed: $(tail -1 "$o.log")"; exit 1; }
  done
  a=$(ips "$tmp/z2"); b=$(ips "$tmp/z3"); c=$(ips "$tmp/z3--bucket-mb1")
  x=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }'); y=$(awk -v a="$a" -v b="$c" 'BEGIN { printf "%.3f", b / a }')
  ratios="$ratios $x" ratios1="$ratios1 $y"
  echo "| $r | $(awk -v v="$a" 'BEGIN { printf "%.0f", v }') | $(awk -v v="$b" 'BEGIN { printf "%.0f", v }') | ${x}x |" \
    "$(awk -v g="$(field "$tmp/z3" gather_s)" -v e="$(field "$tmp/z3" gather_exposed_s)" 'BEGIN { printf "%.4f | %.4f", g / 12, e / 12 }') |" \
    "$(awk -v v="$c" 'BEGIN { printf "%.0f", v }') | ${y}x |" \
    "$(awk -v g="$(field "$tmp/z3--bucket-mb1" gather_s)" -v e="$(field "$tmp/z3--bucket-mb1" gather_exposed_s)" 'BEGIN { printf "%.4f | %.4f", g / 12, e / 12 }') |"
done
echo
range() { echo "$2" | tr ' ' '\n' | sed '/^$/d' | sort -n |
  awk -v what="$1" '{ v[NR] = $1 } END { printf "%s: %.3fx to %.3fx, median %.3fx (target at least 0.9x)\n", what, v[1], v[NR], v[int((NR + 1) / 2)] }'; }
range "ZeRO-3 / ZeRO-2 throughput" "$ratios"
range "ZeRO-3 --bucket-mb 1 / ZeRO-2 throughput" "$ratios1"
echo "ZeRO-3's parameter bytes per rank: $(field "$tmp/z3" param_bytes) (gathered peak $(field "$tmp/z3" param_gathered_peak_bytes)), with --bucket-mb 1 $(field "$tmp/z3--bucket-mb1" param_bytes) (gathered peak $(field "$tmp/z3--bucket-mb1" param_gathered_peak_bytes)); ZeRO-2's $(field "$tmp/z2" param_bytes)"
echo
echo "## Memory at -n 4: ZeRO 0-3"
G="--model gpt --set n_layer=16,n_embd=512,block_size=64 --batch 8 --optim adamw --steps 2 --eval-max 1 --log-every 1 --quiet"
echo "# dtrain train -n 4 --zero 0|1|2|3 $G"
echo
echo "| ZeRO | params MB | grads MB | optimizer MB | model states MB | formula MB | error | gathered peak MB | own count MB | peak RSS MB | RSS - own MB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for z in 0 1 2 3; do
  rm -rf "$tmp/m$z"
  # shellcheck disable=SC2086
  "$dt" train -n 4 --zero $z $G --out "$tmp/m$z" > "$tmp/m$z.log" 2>&1 || { echo "| $z | run failed: $(tail -1 "$tmp/m$z.log") |"; continue; }
  P=$(field "$tmp/m$z" params); p=$(field "$tmp/m$z" param_bytes); g=$(field "$tmp/m$z" grad_bytes)
  o=$(field "$tmp/m$z" optim_bytes); gp=$(field "$tmp/m$z" param_gathered_peak_bytes)
  own=$(field "$tmp/m$z" own_max_bytes); rss=$(field "$tmp/m$z" rss_peak_max_bytes)
  awk -v z="$z" -v P="$P" -v p="$p" -v g="$g" -v o="$o" -v gp="${gp:-0}" -v own="$own" -v rss="$rss" 'BEGIN {
    N = 4; shard = 4 * P / N            # bytes of one rank'"'"'s shard of 4-byte values
    fp = z >= 3 ? shard : 4 * P; fg = z >= 2 ? shard : 4 * P; fo = z >= 1 ? 2 * shard : 8 * P
    states = z >= 3 ? 2 * g + o : p + g + o   # ZeRO-3: the parameter shard (= the gradient shard), not the gathers
    formula = fp + fg + fo
    gathered = z >= 3 ? sprintf("%.1f (bound %.1f)", gp / 1e6, (p - g) / 1e6) : "-"
    printf "| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %+.1f%% | %s | %.1f | %.1f | %.1f |\n", z, p / 1e6, g / 1e6, o / 1e6,
      states / 1e6, formula / 1e6, 100 * (states - formula) / formula, gathered,
      own / 1e6, rss / 1e6, (rss - own) / 1e6 }'
done
echo
echo "# took $((SECONDS / 60)) min $((SECONDS % 60)) s"
