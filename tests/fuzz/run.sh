#!/usr/bin/env bash
# Fuzzes the file readers with libFuzzer + ASan + UBSan:
#   fuzz_safetensors  dt_st_parse (checkpoints, reference tensors)
#   fuzz_idx          dt_idx_read (IDX, plain and gzipped)
#   fuzz_npy          dt_npy_parse, dt_npz_open, dt_csv_read, dt_tokbin_open (.npy, .npz,
#                     CSV, llm.c token shards), each on every input
#   fuzz_desc         dt_desc_build (model descriptions: JSON, expressions, layers)
# Usage: tests/fuzz/run.sh [SECONDS]   (per fuzzer, default 60)
# Builds with clang straight from the sources (no CMake), seeds each corpus from
# tests/fixtures/*.safetensors and small IDX, .npy, .npz, CSV and shard files made here, and runs each
# fuzzer with -max_len=65536. Everything goes to a mktemp -d directory
# (FUZZ_WORKDIR overrides), removed on success and kept, with the crashing
# input, on failure. Exit status: 0 clean, 1 a fuzzer crashed, 2 build failed.
# Environment: FUZZ_CC (default clang), FUZZ_WORKDIR (kept afterwards).
set -u
secs=${1:-60}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cc=${FUZZ_CC:-clang}
work=${FUZZ_WORKDIR:-$(mktemp -d "${TMPDIR:-/tmp}/dtrain-fuzz.XXXXXX")}
mkdir -p "$work"
keep=0
cleanup() { if [ "$keep" = 0 ] && [ -z "${FUZZ_WORKDIR:-}" ]; then rm -rf "$work"; fi; }
trap cleanup EXIT

flags=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -fno-omit-frame-pointer -g -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE
       -I"$root/include" -I"$root/src" -Wno-unused-command-line-argument -Wno-psabi)
core=("$root"/src/core/*.c)

build() { # name sources...
    local name=$1; shift
    if ! "$cc" "${flags[@]}" "$@" -o "$work/$name" -ljansson -lz -lm -lpthread \
            >"$work/$name.build.log" 2>&1; then
        echo "run.sh: building $name failed:" >&2
        cat "$work/$name.build.log" >&2
        return 1
    fi
}
build fuzz_safetensors "$here/fuzz_safetensors.c" "${core[@]}" "$root/src/ckpt/safetensors.c" "$root/src/compress/half.c" &
p1=$!
build fuzz_idx "$here/fuzz_idx.c" "${core[@]}" "$root"/src/data/*.c &
p2=$!
wait $p1 || ok1=0
build fuzz_npy "$here/fuzz_npy.c" "${core[@]}" "$root"/src/data/*.c &
p3=$!
ok=${ok1:-1}
wait $p2 || ok=0
wait $p3 || ok=0
model=("$root"/src/model/*.c "$root"/src/nn/*.c)
build fuzz_desc "$here/fuzz_desc.c" "${core[@]}" "${model[@]}" -I/usr/include/x86_64-linux-gnu/openblas-pthread -lopenblas || ok=0
if [ $ok = 0 ]; then keep=1; exit 2; fi

# ---- seed corpora ----------------------------------------------------------------
st="$work/corpus_safetensors"; idx="$work/corpus_idx"; npy="$work/corpus_npy"
mkdir -p "$st" "$idx" "$npy"
for f in "$root"/tests/fixtures/*.safetensors; do
    [ -f "$f" ] && [ "$(stat -c %s "$f")" -le 65536 ] && cp "$f" "$st/"
done
# IDX: u8 (3) ; u8 (2,2,2) ; i8 (2) ; i16 (2) ; i32 (1) ; f32 (2) ; f64 (1) ; labels.
printf '\0\0\x08\x01\0\0\0\x03abc'                                   >"$idx/u8_1d"
printf '\0\0\x08\x03\0\0\0\x02\0\0\0\x02\0\0\0\x02\1\2\3\4\5\6\7\x08' >"$idx/u8_3d"
printf '\0\0\x09\x01\0\0\0\x02\x80\x7f'                               >"$idx/i8"
printf '\0\0\x0b\x01\0\0\0\x02\x12\x34\xff\xfe'                       >"$idx/i16"
printf '\0\0\x0c\x01\0\0\0\x01\x01\x02\x03\x04'                       >"$idx/i32"
printf '\0\0\x0d\x01\0\0\0\x02\x3f\x80\0\0\xc0\0\0\0'                 >"$idx/f32"
printf '\0\0\x0e\x01\0\0\0\x01\x3f\xf0\0\0\0\0\0\0'                   >"$idx/f64"
printf '\0\0\x08\x01\0\0\0\x0a\0\1\2\3\4\5\6\7\x08\x09'               >"$idx/labels"
if command -v gzip >/dev/null; then
    gzip -c -n "$idx/u8_3d" >"$idx/u8_3d.gz"
    gzip -c -n "$idx/f32" >"$idx/f32.gz"
fi
if command -v python3 >/dev/null; then
    # A small multi-dtype safetensors with metadata and a 0-element tensor.
    python3 - "$st/multi.safetensors" <<'PY'
import json, struct, sys
tensors = [("a", "F32", [2], struct.pack("<2f", 1.5, -2)),
           ("b", "F16", [1, 2], struct.pack("<2H", 0x3C00, 0x0001)),
           ("c", "BF16", [1], struct.pack("<H", 0x3F80)),
           ("d", "F64", [1], struct.pack("<d", 3.25)),
           ("e", "I64", [1], struct.pack("<q", -7)),
           ("f", "I32", [], struct.pack("<i", 5)),
           ("g", "I16", [1], struct.pack("<h", -3)),
           ("h", "I8", [2], b"\x80\x7f"),
           ("i", "U8", [1, 1, 1], b"\xff"),
           ("j", "BOOL", [1], b"\x01"),
           ("k", "F32", [0, 3], b"")]
hdr, off, blob = {"__metadata__": {"format": "pt", "step": "3"}}, 0, b""
for name, dt, shape, raw in tensors:
    hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
    off += len(raw); blob += raw
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + blob)
PY
fi

# .npy (three header versions, several dtypes), .npz (stored, deflated, zip64 local
# headers as np.savez writes them), CSV and an llm.c shard; plain Python, no NumPy.
printf 'a,y,b\n1,2,3\n4.5,-6e2,"7"\n'                                   >"$npy/csv"
printf '"x","y"\r\n1,\r\n'                                              >"$npy/csv_missing"
if command -v python3 >/dev/null; then
    python3 - "$npy" <<'PY'
import io, struct, sys, zipfile
out = sys.argv[1]
def npy(descr, shape, raw, major=1):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    pre = 10 if major == 1 else 12
    hl = len(d) + 1; hl += (64 - (pre + hl) % 64) % 64
    h = d.encode() + b" " * (hl - len(d) - 1) + b"\n"
    lenb = struct.pack("<H", hl) if major == 1 else struct.pack("<I", hl)
    return b"\x93NUMPY" + bytes([major, 0]) + lenb + h + raw
arrs = {"x": npy("<f4", "(2, 3)", struct.pack("<6f", *range(6))),
        "y": npy("<i8", "(2,)", struct.pack("<2q", 1, 0), 2),
        "x_test": npy("|u1", "(1, 3)", b"abc", 3),
        "y_test": npy("<f8", "(1,)", struct.pack("<d", 0.5))}
for k, v in arrs.items():
    open("%s/%s.npy" % (out, k), "wb").write(v)
for name, comp in (("stored.npz", zipfile.ZIP_STORED), ("deflated.npz", zipfile.ZIP_DEFLATED)):
    with zipfile.ZipFile("%s/%s" % (out, name), "w", comp) as z:
        for k, v in arrs.items():
            with z.open(k + ".npy", "w", force_zip64=True) as f:
                f.write(v)
open("%s/shard.bin" % out, "wb").write(struct.pack("<256i", 20240520, 1, 12, *([0] * 253)) + struct.pack("<12H", *range(12)))
PY
fi

# Tokens of the safetensors header, so mutations stay close to valid JSON.
dict="$work/safetensors.dict"
for t in '"dtype"' '"shape"' '"data_offsets"' '"__metadata__"' '"F64"' '"F32"' '"F16"' \
         '"BF16"' '"I64"' '"I32"' '"I16"' '"I8"' '"U8"' '"BOOL"' '[]' '{}' '[0,0]' \
         '18446744073709551615' '9223372036854775807' '-1' '1e3' '\u0000' '\ud800'; do
    printf '"%s"\n' "$(printf '%s' "$t" | sed 's/\\/\\\\/g; s/"/\\"/g')"
done >"$dict"

# ---- run -------------------------------------------------------------------------
status=0
# model descriptions: the shipped ones, each behind a tp byte (1 and 2 ranks)
desc="$work/corpus_desc"; mkdir -p "$desc"
for f in "$root"/models/*.json; do
    { printf '\0'; cat "$f"; } >"$desc/$(basename "$f").tp1"
    { printf '\1'; cat "$f"; } >"$desc/$(basename "$f").tp2"
done
for name in fuzz_safetensors fuzz_idx fuzz_npy fuzz_desc; do
    corpus="$work/corpus_${name#fuzz_}"
    extra=()
    [ "$name" = fuzz_safetensors ] && extra=(-dict="$dict")
    echo "== $name: $secs s, seeds: $(ls "$corpus" | wc -l)"
    # The IDX reader may allocate up to its 4 GiB cap from a forged header
    # before it sees the file is short (fuzz_idx skips the headers it can see do
    # that, for speed); the pages are never touched, so allow
    # the allocation rather than report it.
    ( cd "$work" && ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1} \
      UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
      "./$name" -max_len=65536 -max_total_time="$secs" -timeout=10 \
        -rss_limit_mb=3072 -malloc_limit_mb=4200 -print_final_stats=1 \
        "${extra[@]}" -artifact_prefix="$work/$name-" "$corpus" >"$work/$name.log" 2>&1 )
    rc=$?
    grep -E '^#[0-9]+.*DONE|stat::number_of_executed_units|stat::new_units_added' \
        "$work/$name.log" | tail -3
    if [ $rc != 0 ]; then
        status=1
        echo "!! $name failed (exit $rc); log tail:"
        grep -v '^#[0-9]' "$work/$name.log" | tail -40
        for a in "$work/$name"-*; do
            [ -f "$a" ] || continue
            echo "!! artifact $a:"; od -An -tx1 -v "$a" | head -20
        done
    fi
done
if [ $status != 0 ]; then keep=1; echo "run.sh: crash artifacts and logs kept in $work"; fi
exit $status
