#!/usr/bin/env bash
# The installed tree stands alone: `cmake --install` into a temporary prefix
# gives the CLI, both libraries, every public header and dtrain.pc, and
# examples/train_mlp.c, copied out of the source tree, builds from pkg-config
# alone (shared, and static with --static), runs, and reports each logged step
# through the reporter hooks. In a sanitizer build dtrain.pc's Libs carries
# -fsanitize=..., so the example links the ASan/UBSan runtime the library needs.
# Usage: test_install.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
fm=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM HUP
source "$here/lib.sh"

cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
libdir=$(cache CMAKE_INSTALL_LIBDIR); libdir=${libdir:-lib}
incdir=$(cache CMAKE_INSTALL_INCLUDEDIR); incdir=${incdir:-include}
[ "$(cache DT_SANITIZE)" = ON ] && echo "sanitizer build: dtrain.pc links the example with -fsanitize=address,undefined"
p=$tmp/prefix

if ! cmake --install "$build" --prefix "$p" > "$tmp/install.log" 2>&1; then
  fail "cmake --install exited non-zero:"; tail -5 "$tmp/install.log"; finish; exit 1
fi
ok "cmake --install into a temporary prefix"

# ---- the files -------------------------------------------------------------
for f in bin/dtrain "$libdir/libdtrain.a" "$libdir/libdtrain.so" "$libdir/libdtrain.so.0" \
         "$libdir/pkgconfig/dtrain.pc"; do
  if [ -e "$p/$f" ]; then ok "installed $f"; else fail "missing $f; installed: $(cd "$p" && find . -type f | tr '\n' ' ')"; fi
done
[ -x "$p/bin/dtrain" ] || fail "bin/dtrain is not executable: $(ls -l "$p/bin/dtrain" 2>&1)"
soname=$(readelf -d "$p/$libdir/libdtrain.so" 2>&1 | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = libdtrain.so.0 ] && ok "SONAME $soname" || fail "SONAME '$soname', want libdtrain.so.0"
missing=""
for h in "$here"/../include/dtrain/*.h; do
  [ -f "$p/$incdir/dtrain/$(basename "$h")" ] || missing+=" $(basename "$h")"
done
[ -z "$missing" ] && ok "every header of include/dtrain installed" || fail "headers not installed:$missing"

# ---- pkg-config sees only the installed tree ---------------------------------
export PKG_CONFIG_PATH=$p/$libdir/pkgconfig
cflags=$(pkg-config --cflags dtrain 2>&1) || fail "pkg-config --cflags dtrain: $cflags"
libs=$(pkg-config --libs dtrain 2>&1) || fail "pkg-config --libs dtrain: $libs"
slibs=$(pkg-config --static --libs dtrain 2>&1) || fail "pkg-config --static --libs dtrain: $slibs"
srcinc=$(cd "$here/../include" && pwd)
if grep -qF -- "$srcinc" <<<"$cflags $libs $slibs"; then fail "pkg-config names the source tree: $cflags $libs"; fi
inc=$(sed -n 's/^-I\([^ ]*\).*/\1/p' <<<"$cflags")
[ -f "$inc/dtrain/dtrain.h" ] && [ "$(cd "$inc" && pwd -P)" = "$(cd "$p/$incdir" && pwd -P)" ] \
  && ok "Cflags point into the prefix: $inc" || fail "Cflags '$cflags' do not lead to $p/$incdir"

# ---- every installed header compiles on its own, in C11 and C++ ------------------
bad=""
for h in "$p/$incdir"/dtrain/*.h; do
  b=$(basename "$h")
  # shellcheck disable=SC2086
  out=$(echo "#include <dtrain/$b>" | cc -fsyntax-only -std=c11 -Wall -Wextra -Wpedantic -Werror -xc - $cflags 2>&1) || bad+=" $b(C): $out"
  if command -v c++ >/dev/null; then
    # shellcheck disable=SC2086
    out=$(echo "#include <dtrain/$b>" | c++ -fsyntax-only -std=c++11 -Wall -Wextra -Wpedantic -Werror -xc++ - $cflags 2>&1) || bad+=" $b(C++): $out"
  fi
done
[ -z "$bad" ] && ok "every installed header compiles alone (C11$(command -v c++ >/dev/null && echo ', C++11'))" || fail "headers that do not compile alone:$bad"

# ---- build the example from a copy, shared and static --------------------------
mkdir "$tmp/ex" && cp "$here/../examples/train_mlp.c" "$tmp/ex/" && cd "$tmp/ex" || exit 1
warn="-std=c11 -Wall -Wextra -Wpedantic -Werror"
# shellcheck disable=SC2086  # flags are words
if out=$(cc $warn train_mlp.c -o train_shared $cflags $libs 2>&1); then ok "example builds against libdtrain.so"; else fail "shared build: $out"; fi
# -l:libdtrain.a: the static archive even though libdtrain.so sits beside it
# shellcheck disable=SC2086
if out=$(cc $warn train_mlp.c -o train_static $cflags ${slibs//-ldtrain/-l:libdtrain.a} 2>&1); then ok "example builds against libdtrain.a"; else fail "static build: $out"; fi
[ -x train_shared ] && { readelf -d train_shared | grep -q 'NEEDED.*\[libdtrain\.so\.0\]' \
  && ok "shared example needs libdtrain.so.0" || fail "shared example does not need libdtrain.so.0: $(readelf -d train_shared | grep NEEDED)"; }
[ -x train_static ] && { readelf -d train_static | grep -q 'NEEDED.*libdtrain' \
  && fail "static example needs libdtrain.so: $(readelf -d train_static | grep NEEDED)" || ok "static example carries libdtrain in itself"; }

# ---- run each: every logged step reported, a sane accuracy ---------------------
check_run() {  # check_run NAME: runs ./NAME, checks its output
  local name=$1 rc
  LD_LIBRARY_PATH=$p/$libdir timeout 300 "./$name" "$fm" > "$name.out" 2>&1; rc=$?
  if [ "$rc" -ne 0 ]; then fail "$name exited $rc:"; tail -5 "$name.out"; return; fi
  ok "$name ran: $(tail -1 "$name.out")"
  if [ "$name" = train_shared ]; then
    local so; so=$(LD_LIBRARY_PATH=$p/$libdir ldd "./$name" | sed -n 's/.*libdtrain\.so\.0 => \([^ ]*\).*/\1/p')
    [ "$(realpath "$so" 2>/dev/null)" = "$(realpath "$p/$libdir/libdtrain.so.0")" ] \
      && ok "$name loads the installed libdtrain.so.0" || fail "$name loads libdtrain from '$so'"
  fi
  # report.h: on_step runs every log_every (10) steps and at the last one (30)
  local steps; steps=$(sed -n 's|^step \([0-9]*\)/30 loss [0-9.]*.*|\1|p' "$name.out" | tr '\n' ' ')
  if [ -z "$steps" ]; then
    fail "$name: on_step was never called (output: $(head -3 "$name.out" | tr '\n' '|'))"
  elif awk -v s="$steps" 'BEGIN { n = split(s, a, " "); for (i = 1; i <= n; i++) if (a[i] < 1 || a[i] > 30 || (i > 1 && a[i] <= a[i-1])) exit 1; exit a[n] != 30 }'; then
    ok "$name: on_step reported steps $steps"
  else
    fail "$name: on_step reported steps '$steps', want increasing steps in 1..30 ending at 30"
  fi
  local acc; acc=$(sed -n 's/^final test accuracy \([0-9.]*\).*/\1/p' "$name.out")
  awk -v a="$acc" 'BEGIN { exit !(a != "" && a > 0.5 && a <= 1) }' \
    && ok "$name: final accuracy $acc" || fail "$name: final accuracy '$acc', want in (0.5, 1]"
}
[ -x train_shared ] && check_run train_shared
[ -x train_static ] && check_run train_static
finish
