#!/usr/bin/env bash
# The Python package (issue 18): importable from the build after make; a run
# from Python with a per-step callback is the command line's run bit for bit
# (weights and every logged loss); NumPy arrays as data equal the same arrays
# as .npy files on the command line; bad flags raise DtrainError with the
# command line's message; a callback that raises stops the run and its
# exception comes back; load_weights and state_dict read a run's weights;
# launch(n=2) runs the command line's launcher and equals `dtrain train -n 2`.
source "$(dirname "$0")/lib.sh" "$@"
export PYTHONPATH="$1/python"
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import numpy" 2>/dev/null; then
  echo "skip the Python package's test: $PY has no numpy (Debian's python3-numpy; make test installs it)"; finish; exit; fi
py() { "$PY" - "$tmp" "$dt" "$@"; }

out=$("$PY" -c "import dtrain; print(dtrain.__name__, len(dtrain.__all__))" 2>&1) &&
  ok "import dtrain from $PYTHONPATH: $out" || fail "import dtrain: $out"

F="--model mlp --hidden 32,16 --batch 32 --steps 20 --lr 0.05 --log-every 2 --eval-every 10 --quiet"
run cli $F && py <<'PYEOF' > "$tmp/py.out" 2>&1
import json, sys, dtrain
tmp = sys.argv[1]
seen = []
r = dtrain.train(model="mlp", hidden="32,16", batch=32, steps=20, lr=0.05, log_every=2, eval_every=10, quiet=True,
                 out=tmp + "/pyrun", on_step=lambda s: seen.append((s["step"], s["loss"])))
json.dump({"seen": seen, "summary": r}, open(tmp + "/py.json", "w"))
PYEOF
if [ $? -eq 0 ]; then
  d=$("$dt" diff "$tmp/cli/model.safetensors" "$tmp/pyrun/model.safetensors" 2>&1) && dr=0 || dr=1
  cl=$(losses "$tmp/cli" | awk '{ printf "%d %.9g\n", $1, $2 }' | sort -n | uniq | tr '\n' ' ')
  pl=$("$PY" -c "import json,sys; print(' '.join('%d %.9g' % (s, l) for s, l in json.load(open(sys.argv[1]))['seen']))" "$tmp/py.json")
  n=$("$PY" -c "import json,sys; print(len(json.load(open(sys.argv[1]))['seen']))" "$tmp/py.json")
  if [ $dr -eq 0 ] && [ "$cl" = "$pl " ] && [ "$n" = 10 ] && [ -s "$tmp/pyrun/config.json" ] &&
     cmp -s <(grep -v time_s "$tmp/cli/config.json") <(grep -v time_s "$tmp/pyrun/config.json"); then
    ok "dtrain.train with a callback = dtrain train, bitwise: weights ($d), the callback's 10 losses = metrics.jsonl's, config.json"
  else fail "python vs cli: weights: $d; losses cli [$cl] python [$pl] ($n)"; fi
else fail "dtrain.train:"; indent < "$tmp/py.out"; fi

# NumPy arrays as data = the same arrays as x.npy/y.npy on the command line
py <<'PYEOF' > "$tmp/np.out" 2>&1
import os, sys, numpy as np, dtrain
tmp = sys.argv[1]
rng = np.random.default_rng(3)
x = rng.standard_normal((256, 12)).astype(np.float32)
y = (x[:, :3].sum(axis=1) > 0).astype(np.int64)
os.makedirs(tmp + "/npdata")
np.save(tmp + "/npdata/x.npy", x); np.save(tmp + "/npdata/y.npy", y)
r = dtrain.train(model="../models/mlp.json", set="in=12,hidden=16:8,classes=2", data=(x, y), batch=32, steps=24,
                 lr=0.1, quiet=True, out=tmp + "/pynp")
print("acc", r["test_acc"])
PYEOF
if [ $? -eq 0 ] && run clinp --model ../models/mlp.json --set in=12,hidden=16:8,classes=2 --data "$tmp/npdata" --batch 32 \
     --steps 24 --lr 0.1 --quiet &&
   d=$("$dt" diff "$tmp/clinp/model.safetensors" "$tmp/pynp/model.safetensors" 2>&1); then
  ok "data=(x, y) NumPy arrays = the command line on the same .npy files, bitwise ($(tail -1 "$tmp/np.out"))"
else fail "NumPy data:"; indent < "$tmp/np.out"; fi

# bad flags: DtrainError with the command line's own message
for bad in "lr=-1" "bogus=1" "model='vgg'" "precision='fp8'" "data='$tmp/none'"; do
  want=$("$dt" train $(sed "s/^\([a-z_]*\)=/--\1 /; s/'//g; s/_/-/g" <<<"$bad") --steps 1 --quiet 2>&1 >/dev/null | tail -1 |
    sed "s/^dtrain train: //; s/ (see 'dtrain train --help')$//")
  got=$("$PY" -c "
import dtrain
try:
    dtrain.train($bad, steps=1, quiet=True)
    print('no error')
except dtrain.DtrainError as e:
    print(e)" 2>/dev/null)
  [ -n "$want" ] && [ "$got" = "$want" ] && ok "train($bad) raises DtrainError: $got" || fail "train($bad): python '$got', cli '$want'"
done

# a callback that raises stops the run; its exception comes back
got=$(py <<'PYEOF' 2>&1
import dtrain
def cb(s):
    if s["step"] >= 4:
        raise KeyboardInterrupt("enough at %d" % s["step"])
try:
    dtrain.train(model="mlp", hidden="16", steps=50, log_every=1, quiet=True, on_step=cb)
    print("ran to the end")
except KeyboardInterrupt as e:
    print("stopped:", e)
PYEOF
)
[ "$got" = "stopped: enough at 4" ] && ok "a callback that raises stops the run: $got" || fail "raising callback: $got"

# weights: load_weights' arrays are the model: numpy's forward pass over the
# 10000 test images gives dtrain's own test accuracy; state_dict into torch too
py <<'PYEOF' > "$tmp/w.out" 2>&1
import gzip, json, sys, numpy as np, dtrain
tmp = sys.argv[1]
w = dtrain.load_weights(tmp + "/cli/model.safetensors")
print(";".join("%s[%s]" % (k, "x".join(map(str, v.shape))) for k, v in sorted(w.items())))
d = "/usr/share/datasets/fashion-mnist/"
x = np.frombuffer(gzip.open(d + "t10k-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 784).astype(np.float32) / 255
y = np.frombuffer(gzip.open(d + "t10k-labels-idx1-ubyte.gz").read()[8:], np.uint8)
h = np.maximum(x @ w["fc1.weight"].T + w["fc1.bias"], 0)
h = np.maximum(h @ w["fc2.weight"].T + w["fc2.bias"], 0)
acc = float(((h @ w["fc3.weight"].T + w["fc3.bias"]).argmax(1) == y).mean())
ref = [json.loads(l) for l in open(tmp + "/cli/metrics.jsonl") if '"test_acc"' in l][-1]["test_acc"]
print("numpy %.4f dtrain %.4f" % (acc, ref), abs(acc - ref) <= 5e-4)
try:
    import torch
    sd = dtrain.state_dict(tmp + "/cli/model.safetensors")
    print("torch", all(torch.equal(sd[k], torch.from_numpy(w[k])) for k in w))
except ImportError:
    print("torch not importable: state_dict not tried")
PYEOF
want="fc1.bias[32];fc1.weight[32x784];fc2.bias[16];fc2.weight[16x32];fc3.bias[10];fc3.weight[10x16]"
if [ "$(head -1 "$tmp/w.out")" = "$want" ] && sed -n 2p "$tmp/w.out" | grep -q "True$" && ! grep -q "torch False" "$tmp/w.out"; then
  ok "load_weights: $want; $(sed -n 2p "$tmp/w.out" | sed 's/ True$//') test accuracy; $(sed -n 3p "$tmp/w.out")"
else fail "load_weights:"; indent < "$tmp/w.out"; fi

# launch(n=2): the command line's launcher; equal to dtrain train -n 2
run cli2 -n 2 $F && got=$(py <<'PYEOF' 2>&1
import sys, dtrain
tmp = sys.argv[1]
print(dtrain.launch(n=2, model="mlp", hidden="32,16", batch=32, steps=20, lr=0.05, log_every=2, eval_every=10,
                    quiet=True, out=tmp + "/py2"))
try:
    dtrain.launch(n=2, model="mlp", steps=2, zero=4)
except dtrain.DtrainError as e:
    print("raised:", e)
PYEOF
) && {
  if "$dt" diff "$tmp/cli2/model.safetensors" "$tmp/py2/model.safetensors" > /dev/null && grep -q "^trained mlp: 20 steps" <<<"$got" &&
     grep -q "^raised: --zero 4 is out of range \[0, 3\]$" <<<"$got"; then
    ok "launch(n=2) = dtrain train -n 2, bitwise; its errors raise: $(tail -1 <<<"$got")"
  else fail "launch:"; indent <<<"$got"; fi; }
finish
