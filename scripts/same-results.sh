#!/usr/bin/env bash
# Same results before and after a change to the training engine.
#
#   scripts/same-results.sh record DIR DTRAIN   run the fixed list of short training runs with
#                                               DTRAIN, each into DIR/NAME/ (model.safetensors,
#                                               metrics.jsonl, run.log, the command line)
#   scripts/same-results.sh check DIR DTRAIN    run the same list with DTRAIN into a temporary
#                                               folder and compare every run with DIR/NAME:
#                                               weights bitwise ('DTRAIN diff', no tolerance),
#                                               metrics.jsonl line by line: the same lines, the
#                                               same keys in the same order, strings and integers
#                                               equal, a float equal to the reference's up to the
#                                               precision the reference printed it with (old
#                                               "%.6f" vs new jansson digits), the values of the
#                                               timing keys (TIMING_KEYS) not compared; and the
#                                               line 'dtrain eval --weights' prints
#
# Prints 'same NAME' or 'DIFFERENT NAME: <evidence>' per run; exit 0 only when all are the same.
# SAME_RESULTS_ONLY="name1 name2" restricts either mode to those runs; SAME_RESULTS_KEEP=1 keeps
# check's temporary folder (its path is printed).
#
# Left out on purpose (not deterministic against themselves, so useless as a reference):
#   --strategy ps --consistency asp / ssp:K   which worker's push the server applies first
#                                             depends on arrival order
#   --balance dynamic                         the split of every batch follows measured speed
#   --pp-partition auto                       the partition follows measured block times
#   --strategy hogwild with --threads > 1     lock-free races on the shared model
set -uo pipefail

usage() {
    echo "usage: $0 record|check DIR DTRAIN_BINARY" >&2
    exit 2
}
[ $# -eq 3 ] || usage
mode=$1
ref=$2
bin=$3
case "$mode" in record | check) ;; *) usage ;; esac
[ -x "$bin" ] || { echo "$0: $bin is not an executable" >&2; exit 2; }
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
py=/usr/bin/python3

export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Keys of metrics.jsonl whose values are wall-clock times or rates derived from them (see the
# fprintf(metrics, ...) calls in src/train/train.c, train_ps.c, train_hogwild.c): the key must
# still be there, in the same place, but its value is not compared.
#   time_s items_per_s compute_s comm_exposed_s comm_s encode_s decode_s backward_s: dt_now()
#   busy_s idle_frac: the pipeline's per-stage busy time and 1 - busy/span
#   grad_staging_peak_bytes: not a time, but mincore() of the gradient mapping at a bucket
#     boundary, i.e. how many pages the communication thread had released by then (timing)
TIMING_KEYS="time_s items_per_s compute_s comm_exposed_s comm_s encode_s decode_s backward_s busy_s idle_frac grad_staging_peak_bytes"

# Common flags. Fashion-MNIST and the fortunes corpus are the defaults (--data not given).
S="--steps 20 --log-every 5 --eval-every 10 --timeout 30"
MLP="--model mlp --hidden 256,256 --batch 64 $S"
GPT="--model gpt --n-layer 2 --n-head 4 --n-embd 64 --block-size 32 --batch 8 --eval-max 16 $S"

# NAME|train flags ('@CKPT@' is that run's checkpoint folder). A second '|' field is a second
# command run after the first into the same --out and checkpoint folder (a resumed run).
RUNS=(
    "mlp_1|$MLP"
    "mlp_dp2|-n 2 $MLP"
    "mlp_dp2_zero1|-n 2 --zero 1 $MLP"
    "mlp_dp2_zero2|-n 2 --zero 2 $MLP"
    "mlp_dp2_nooverlap_rhd|-n 2 --no-overlap --allreduce rhd --bucket-mb 1 $MLP"
    "gpt_dp2_zero1|-n 2 --zero 1 $GPT"
    "gpt_pp2_1f1b|-n 2 --pp 2 --micro-batches 4 $GPT"
    "gpt_pp2_gpipe|-n 2 --pp 2 --micro-batches 4 --schedule gpipe $GPT"
    "mlp_tp2|-n 2 --tp 2 $MLP"
    "gpt_tp2|-n 2 --tp 2 $GPT"
    "gpt_pp2_tp2|-n 4 --pp 2 --tp 2 --micro-batches 2 $GPT"
    "mlp_ps_bsp|-n 3 --strategy ps --servers 1 --consistency bsp $MLP"
    "mlp_localsgd4|-n 2 --strategy localsgd:4 $MLP"
    "mlp_hogwild_t1|--strategy hogwild --threads 1 $MLP"
    "mlp_topk|-n 2 --compress topk:0.05 $MLP"
    "mlp_int8|-n 2 --compress int8 $MLP"
    "mlp_median_byz|-n 3 --aggregate median --inject byzantine:rank=2:mode=signflip $MLP"
    "mlp_cclip_byz|-n 3 --aggregate cclip --inject byzantine:rank=2:mode=signflip $MLP"
    "mlp_accum2|--accum 2 $MLP"
    "mlp_dp2_accum2|-n 2 --accum 2 $MLP"
    "mlp_resume_zero1|-n 2 --zero 1 $MLP --steps 30 --ckpt-dir @CKPT@ --ckpt-every 10|-n 2 --zero 1 $MLP --steps 40 --ckpt-dir @CKPT@ --ckpt-every 10 --resume auto"
    "gpt_resume_pp2|-n 2 --pp 2 --micro-batches 4 $GPT --steps 30 --ckpt-dir @CKPT@ --ckpt-every 10|-n 2 --pp 2 --micro-batches 4 $GPT --steps 40 --ckpt-dir @CKPT@ --ckpt-every 10 --resume auto"
    "mlp_resume_tp2|-n 2 --tp 2 $MLP --steps 30 --ckpt-dir @CKPT@ --ckpt-every 10|-n 2 --tp 2 $MLP --steps 40 --ckpt-dir @CKPT@ --ckpt-every 10 --resume auto"
)
# 'dtrain eval --weights' of run mlp_1's reference weights: the printed line is compared.
EVAL_OF=mlp_1

selected() {
    [ -z "${SAME_RESULTS_ONLY:-}" ] && return 0
    case " $SAME_RESULTS_ONLY " in *" $1 "*) return 0 ;; esac
    return 1
}

# run_one NAME FLAGS1 [FLAGS2] OUTROOT: trains into OUTROOT/NAME; 0 when every command succeeded.
run_one() {
    local name=$1 f1=$2 f2=$3 root=$4
    local out=$root/$name ck=$root/$name/ckpt
    rm -rf "$out"
    mkdir -p "$out"
    local i=0 f
    for f in "$f1" "$f2"; do
        [ -n "$f" ] || continue
        i=$((i + 1))
        f=${f//@CKPT@/$ck}
        # shellcheck disable=SC2086
        echo "dtrain train $f --out $out" >>"$out/cmd.txt"
        # shellcheck disable=SC2086
        if ! timeout 120 "$bin" train $f --out "$out" >>"$out/run.log" 2>&1; then
            echo "command $i failed: dtrain train $f --out $out (log: $out/run.log)" >"$out/failed"
            return 1
        fi
    done
    # Only what is compared is kept (the checkpoints are large and not compared).
    rm -rf "$ck"
    return 0
}

# compare_metrics REF NEW: prints nothing and returns 0 when the same, else one line of evidence.
compare_metrics() {
    "$py" - "$1" "$2" "$TIMING_KEYS" <<'EOF'
import decimal, json, math, os, sys

ref_path, new_path, timing = sys.argv[1], sys.argv[2], set(sys.argv[3].split())
# SAME_RESULTS_RTOL=1e-6 also accepts any float within that relative tolerance (looser: it
# lets a change in the last printed digit of a value above 0.5 through).
RTOL = float(os.environ.get("SAME_RESULTS_RTOL", "0"))

class Num:
    def __init__(self, kind, text):
        self.kind, self.text = kind, text

class Obj:
    def __init__(self, pairs):
        self.pairs = pairs
        self.keys = [k for k, _ in pairs]

def load(p):
    with open(p) as f:
        raw = [l for l in f.read().split("\n") if l.strip()]
    # Every number keeps its text, to know the precision it was printed with.
    return [json.loads(l, object_pairs_hook=Obj, parse_float=lambda s: Num("f", s),
                       parse_int=lambda s: Num("i", s)) for l in raw]

def num_eq(ref, new):
    """new matches ref when both are integers and equal, or when ref's text is a correct
    rounding of new: |new - ref| <= half a unit of ref's last printed digit. The old code
    printed "%.6f" / "%.6g" / "%.4f"; the new one may print every digit (jansson), which must
    round to what the old one printed. Same printed precision on both sides: exactly equal."""
    if ref.kind == "i" and new.kind == "i":
        return int(ref.text) == int(new.text)
    x, y = float(ref.text), float(new.text)
    if x == y or (math.isnan(x) and math.isnan(y)):
        return True
    if RTOL > 0 and abs(x - y) <= RTOL * max(abs(x), abs(y)):
        return True
    try:
        e = decimal.Decimal(ref.text).as_tuple().exponent
    except decimal.InvalidOperation:
        return False
    if not isinstance(e, int):
        return False
    half = 0.5 * 10.0 ** e
    return abs(x - y) <= half * (1 + 1e-9)

def show(v):
    if isinstance(v, Num):
        return v.text
    if isinstance(v, Obj):
        return "{" + ",".join('"%s":%s' % (k, show(x)) for k, x in v.pairs) + "}"
    if isinstance(v, list):
        return "[" + ",".join(show(x) for x in v) + "]"
    return json.dumps(v)

def eq(a, b):
    if isinstance(a, Num) and isinstance(b, Num):
        return num_eq(a, b)
    if isinstance(a, Obj) and isinstance(b, Obj):
        return a.keys == b.keys and all(k in timing or eq(x, y) for (k, x), (_, y) in zip(a.pairs, b.pairs))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(eq(x, y) for x, y in zip(a, b))
    if isinstance(a, (Num, Obj, list)) or isinstance(b, (Num, Obj, list)):
        return False
    return type(a) == type(b) and a == b

try:
    R, N = load(ref_path), load(new_path)
except Exception as e:
    print("metrics.jsonl unreadable: %s" % e)
    sys.exit(1)
if len(R) != len(N):
    print("metrics.jsonl has %d lines, the reference %d" % (len(N), len(R)))
    sys.exit(1)
for i, (a, b) in enumerate(zip(R, N), 1):
    if not isinstance(a, Obj) or not isinstance(b, Obj):
        print("metrics line %d: not a JSON object" % i)
        sys.exit(1)
    if a.keys != b.keys:
        print("metrics line %d: keys %s, the reference %s" % (i, ",".join(b.keys), ",".join(a.keys)))
        sys.exit(1)
    for (k, x), (_, y) in zip(a.pairs, b.pairs):
        if k in timing:
            continue
        if not eq(x, y):
            print("metrics line %d: %s = %s, the reference %s" % (i, k, show(y), show(x)))
            sys.exit(1)
sys.exit(0)
EOF
}

# compare_run NAME REFROOT NEWROOT: prints 'same NAME' or 'DIFFERENT NAME: ...'; 0 when same.
compare_run() {
    local name=$1 r=$2/$1 n=$3/$1 ev
    if [ -f "$n/failed" ]; then
        echo "DIFFERENT $name: $(cat "$n/failed"); last log line: $(tail -n 1 "$n/run.log")"
        return 1
    fi
    for f in model.safetensors metrics.jsonl; do
        if [ ! -f "$r/$f" ]; then
            echo "DIFFERENT $name: the reference has no $r/$f (record again?)"
            return 1
        fi
        if [ ! -f "$n/$f" ]; then
            echo "DIFFERENT $name: the run wrote no $f"
            return 1
        fi
    done
    if ! ev=$("$bin" diff "$r/model.safetensors" "$n/model.safetensors" 2>&1); then
        echo "DIFFERENT $name: weights: $(echo "$ev" | head -n 3 | tr '\n' ' ')"
        return 1
    fi
    if ! ev=$(compare_metrics "$r/metrics.jsonl" "$n/metrics.jsonl"); then
        echo "DIFFERENT $name: $ev"
        return 1
    fi
    echo "same $name"
}

if [ "$mode" = record ]; then
    mkdir -p "$ref" || exit 2
    root=$(cd "$ref" && pwd)
else
    [ -d "$ref" ] || { echo "$0: no reference folder $ref" >&2; exit 2; }
    ref=$(cd "$ref" && pwd)
    root=$(mktemp -d "${TMPDIR:-/tmp}/same-results.XXXXXX")
fi

t_start=$(date +%s)
fail=0
for entry in "${RUNS[@]}"; do
    name=${entry%%|*}
    rest=${entry#*|}
    f1=${rest%%|*}
    f2=""
    [ "$rest" != "$f1" ] && f2=${rest#*|}
    selected "$name" || continue
    t0=$(date +%s)
    run_one "$name" "$f1" "$f2" "$root"
    ok=$?
    if [ "$mode" = record ]; then
        if [ $ok -eq 0 ]; then
            echo "recorded $name ($(($(date +%s) - t0)) s)"
        else
            echo "FAILED $name: $(cat "$root/$name/failed")"
            fail=1
        fi
    else
        compare_run "$name" "$ref" "$root" || fail=1
    fi
done

# dtrain eval of one run's reference weights: the new binary evaluates the very file the old one
# did, so eval is checked apart from training. Run from the folder that holds it, so that the
# printed line names it by a relative path (the reference folder may be moved).
if selected "eval_$EVAL_OF"; then
    name=eval_$EVAL_OF
    wdir=$ref
    [ "$mode" = record ] && wdir=$root
    mkdir -p "$root/$name"
    if ! (cd "$wdir" && "$bin" eval --weights "$EVAL_OF/model.safetensors") >"$root/$name/eval.txt" 2>"$root/$name/run.log"; then
        echo "FAILED $name: dtrain eval --weights $wdir/$EVAL_OF/model.safetensors: $(tail -n 1 "$root/$name/run.log")"
        fail=1
    elif [ "$mode" = record ]; then
        echo "recorded $name: $(cat "$root/$name/eval.txt")"
    elif [ ! -f "$ref/$name/eval.txt" ]; then
        echo "DIFFERENT $name: the reference has no $ref/$name/eval.txt"
        fail=1
    elif ! cmp -s "$ref/$name/eval.txt" "$root/$name/eval.txt"; then
        echo "DIFFERENT $name: printed '$(cat "$root/$name/eval.txt")', the reference '$(cat "$ref/$name/eval.txt")'"
        fail=1
    else
        echo "same $name"
    fi
fi

echo "($mode took $(($(date +%s) - t_start)) s)"
if [ "$mode" = check ]; then
    if [ "${SAME_RESULTS_KEEP:-0}" = 1 ] || [ $fail -ne 0 ]; then
        echo "new runs kept in $root"
    else
        rm -rf "$root"
    fi
fi
exit $fail
