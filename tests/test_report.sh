#!/usr/bin/env bash
# dtrain report (issue 18): one self-contained page for several runs, checked
# in a real browser when one is here (Debian's chromium; make test installs
# it): every chart has one series per run with as many points as the run
# logged, the evaluations are marked, and the page requests nothing (Chromium's
# own network log, and a page that does fetch is caught by the same check).
# Also: a run killed mid-line (its cut line skipped, with a note), an empty run
# and bad input (one line, exit 1), 300000 steps (downsampled, said so), and
# --watch (reloads while a run goes on, stops by itself when it ends).
source "$(dirname "$0")/lib.sh" "$@"
dt=$(cd "$(dirname "$dt")" && pwd)/dtrain # the report runs from inside $tmp

M="--model mlp --hidden 32 --batch 32 --steps 30 --log-every 1 --eval-every 10 --quiet"
run a $M && run b $M -n 2 --lr 0.02 --precision fp16 --inject overflow:rank=1:step=5 &&
  run c --model mlp --hidden 32 --batch 32 --steps 20 --log-every 1 --quiet -n 3 --strategy ps --consistency asp &&
  run d $M -n 2 --pp 2 --micro-batches 2 && run e $M -n 2 --compress topk:0.1 || { finish; exit; }
steps() { grep -c '"items_per_s"' "$tmp/$1/metrics.jsonl"; }
evals() { grep -c '"test_acc"' "$tmp/$1/metrics.jsonl"; }
(cd "$tmp" && "$dt" report a b c d e --out report.html) > "$tmp/rep.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "wrote report.html (5 runs)" "$tmp/rep.out" && ! grep -Eq '(src|href)=|@import|url\(' "$tmp/report.html"; then
  ok "report of 5 runs: $(wc -c < "$tmp/report.html") bytes, no src/href/url() in the page"
else fail "report rc=$rc:"; indent < "$tmp/rep.out"; fi
grep -q '"name":"b".*"event":"overflow"' "$tmp/report.html" && grep -q '"command":"dtrain train --model mlp' "$tmp/report.html" &&
  ok "the page holds the events and each run's command line" || fail "events or command missing from the page"

# ---- in a browser -----------------------------------------------------------------
CH=$(command -v chromium || command -v chromium-browser || true)
browse() { # PAGE: DOM into $tmp/dom.html, network log into $tmp/net.json
  rm -rf "$tmp/prof"
  timeout 90 "$CH" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
    --user-data-dir="$tmp/prof" --log-net-log="$tmp/net.json" --dump-dom "file://$1" > "$tmp/dom.html" 2> "$tmp/chrome.log"
}
# requests a document started (Chromium's own, for updates and accounts, have no origin)
page_requests() {
  "${PYTHON:-/usr/bin/python3}" -c '
import json, sys
d = json.load(open(sys.argv[1])); ty = {v: k for k, v in d["constants"]["logEventTypes"].items()}
print(" ".join(e["params"]["url"] for e in d["events"] if ty.get(e["type"]) == "URL_REQUEST_START_JOB"
               and e["params"].get("initiator", "not an origin") != "not an origin"))' "$tmp/net.json"
}
attr() { grep -o "data-chart=\"$1\" data-series=\"[0-9]*\"" "$tmp/dom.html" | grep -o '[0-9]*"$' | tr -d '"'; }
pts() { grep -o "<svg[^>]*data-chart=\"$1\".*</svg>" "$tmp/dom.html" | grep -o "class=\"$3\" data-run=\"$2\" data-points=\"[0-9]*\"" |
        head -1 | grep -o '[0-9]*"$' | tr -d '"'; }
if [ $sanitized = 1 ]; then echo "skip the browser checks (sanitizer build: the optimised build's pass opens the page)"
elif [ -z "$CH" ]; then
  echo "skip the browser checks: no chromium here (Debian's chromium; make test installs it through scripts/install-deps.sh)"
elif browse "$tmp/report.html"; then
  bad=""
  for r in a b c d e; do
    [ "$(pts loss-step $r series)" = "$(steps $r)" ] || bad="$bad loss-step:$r=$(pts loss-step $r series)/$(steps $r)"
    [ "$(pts throughput $r series)" = "$(steps $r)" ] || bad="$bad throughput:$r"
  done
  for r in a b d e; do [ "$(pts loss-step $r marks)" = "$(evals $r)" ] || bad="$bad evalmarks:$r"; done
  [ "$(attr loss-step)" = 5 ] && [ "$(attr loss-time)" = 5 ] && [ "$(attr eval-step)" = 5 ] || bad="$bad series-count"
  [ "$(attr loss-scale)" = 1 ] && [ "$(attr compress)" = 1 ] && [ "$(attr ef-norm)" = 1 ] && [ "$(pts ef-norm e series)" = "$(steps e)" ] &&
    [ "$(attr staleness)" = 1 ] && [ "$(attr workers)" = 1 ] && [ "$(attr clocks)" = 3 ] &&
    [ "$(pts clocks c series)" = "$(steps c)" ] &&
    [ "$(attr memory)" = 4 ] || bad="$bad per-kind-charts"
  grep -q '<td>bubble\|>bubble<' "$tmp/dom.html" || bad="$bad no-bubble"
  grep -q 'class="diff"' "$tmp/dom.html" || bad="$bad no-config-diff"
  req=$(page_requests)
  res=$(grep -o 'data-resources="[0-9]*"' "$tmp/dom.html")
  if [ -z "$bad" ] && [ -z "$req" ] && [ "$res" = 'data-resources="0"' ]; then
    ok "in $("$CH" --version 2>/dev/null | head -1): $(grep -o 'data-charts="[0-9]*"' "$tmp/dom.html") charts, one series per run with every logged step, evaluations marked, no request ($res)"
  else fail "browser checks:$bad; page requests '$req'; $res"; fi
  # the check catches a page that fetches
  printf '<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png"></body></html>\n' > "$tmp/fetch.html"
  browse "$tmp/fetch.html"; req=$(page_requests)
  [ -n "$req" ] && ok "a page that fetches is caught: $req" || fail "the network check missed a page's fetch"
  timeout 90 "$CH" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking --user-data-dir="$tmp/prof" \
    --hide-scrollbars --window-size=1300,1900 --screenshot="$tmp/shot.png" "file://$tmp/report.html" > /dev/null 2>&1
  [ -s "$tmp/shot.png" ] && ok "screenshot: $(wc -c < "$tmp/shot.png") bytes of PNG" || fail "no screenshot"
else fail "chromium failed:"; tail -3 "$tmp/chrome.log" | indent; fi

# ---- odd runs -------------------------------------------------------------------------
mkdir "$tmp/cut" "$tmp/empty" "$tmp/bad" "$tmp/big"
cp "$tmp/a/config.json" "$tmp/cut/"
head -c -20 "$tmp/a/metrics.jsonl" > "$tmp/cut/metrics.jsonl" # the end line cut short
(cd "$tmp" && "$dt" report cut --out cut.html) > "$tmp/cut.out" 2>&1 && grep -q "cut short and was skipped" "$tmp/cut.html" &&
  ok "a run killed mid-line: its cut line skipped with a note" || { fail "cut line:"; indent < "$tmp/cut.out"; }
: > "$tmp/empty/metrics.jsonl"
err=$(cd "$tmp" && "$dt" report empty 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && [ "$(wc -l <<<"$err")" = 1 ] && grep -q "nothing to draw" <<<"$err" && ok "an empty run: $err" || fail "empty run rc=$rc: $err"
{ head -3 "$tmp/a/metrics.jsonl"; echo "garbage"; tail -3 "$tmp/a/metrics.jsonl"; } > "$tmp/bad/metrics.jsonl"
err=$("$dt" report "$tmp/bad" --out "$tmp/x.html" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q "line 4 is not a JSON object" <<<"$err" && ok "a bad line: $err" || fail "bad line rc=$rc: $err"
err=$("$dt" report "$tmp/nowhere" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q "no such run folder" <<<"$err" && ok "a missing run: $err" || fail "missing run rc=$rc: $err"
err=$("$dt" report "$tmp/a" --watch 0 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q "whole seconds" <<<"$err" && ok "a bad --watch: $err" || fail "bad --watch rc=$rc: $err"
# (30000 in the sanitizer build, where parsing them is what takes its time)
big=300000; [ $sanitized = 1 ] && big=30000
awk -v n=$big 'BEGIN { for (i = 1; i <= n; i++) printf "{\"step\":%d,\"epoch\":0,\"loss\":%.6f,\"lr\":0.1,\"items_per_s\":1000.0,\"time_s\":%.3f}\n", i, 2 / (1 + i / 1000), i / 100 }' \
  > "$tmp/big/metrics.jsonl"
t0=$(date +%s%N); "$dt" report "$tmp/big" --out "$tmp/big.html" > /dev/null 2>&1; rc=$?; ms=$(( ($(date +%s%N) - t0) / 1000000 ))
n=$(grep -o '"logged":[0-9]*,"every":[0-9]*' "$tmp/big.html")
[ $rc -eq 0 ] && [ "$n" = "\"logged\":$big,\"every\":$((big / 2000))" ] && [ "$(wc -c < "$tmp/big.html")" -lt 400000 ] &&
  ok "$big steps: every $((big / 2000))th drawn ($n; $(wc -c < "$tmp/big.html") bytes, $ms ms)" || fail "big run rc=$rc: $n"

# ---- --watch: reloads while the run goes on, ends when it ends --------------------------
# (slowed 200x, 50x under the sanitizers: their steps are already several times
# longer, and at 200x the run once outlived its 120 s bound there, so its page
# never showed 60 steps)
slow=200; [ $sanitized = 1 ] && slow=50
timeout 300 "$dt" train $M --steps 60 --inject slow:rank=0:factor=$slow --out "$tmp/w" > /dev/null 2>&1 &
tr_pid=$!
has_steps() { grep -q '"items_per_s"' "$tmp/w/metrics.jsonl" 2>/dev/null; }
wait_until 60 has_steps
timeout 330 "$dt" report "$tmp/w" --watch 1 --out "$tmp/w.html" > "$tmp/watch.out" 2>&1 &
rp=$!
live() { grep -q 'http-equiv="refresh" content="1"' "$tmp/w.html" 2>/dev/null; }
wait_until 30 live && was_live=1 || was_live=0
wait $tr_pid; trc=$?
gone() { ! kill -0 $rp 2>/dev/null; }
# (30 s: the sanitizer build beside test_paths on 2 cores took more than 10 to
# see the run end and write the last page)
if wait_until 30 gone && [ $was_live = 1 ] && ! grep -q 'http-equiv="refresh"' "$tmp/w.html" && grep -q '"logged":60' "$tmp/w.html"; then
  ok "--watch: the page reloaded itself while the run went on, then was written whole without reloading and the watcher ended"
else fail "--watch: live=$was_live, run exit $trc, page $(grep -o '"logged":[0-9]*' "$tmp/w.html" | head -1), refresh left: $(grep -c 'http-equiv="refresh"' "$tmp/w.html"), watcher still running: $(kill -0 $rp 2>/dev/null && echo yes || echo no)"; kill $rp 2>/dev/null; fi
finish
