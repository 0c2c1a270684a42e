#!/usr/bin/env bash
# PyTorch (where Debian's python3-torch is installed) loads a weights file
# exported from a dtrain checkpoint with load_state_dict(strict=True) and
# reproduces dtrain's own evaluation. Skipped when torch is not installed.
py=/usr/bin/python3
if ! $py -c "import torch" 2>/dev/null; then echo "skipped: python3-torch is not installed"; exit 0; fi
[ -d /usr/share/datasets/fashion-mnist ] || { echo "skipped: no Fashion-MNIST"; exit 0; }
source "$(dirname "$0")/lib.sh" "$@"
run m -n 2 --zero 1 --model mlp --hidden 128 --steps 60 --quiet --ckpt-dir "$tmp/ck" || exit 1
"$dt" export "$tmp/ck/ckpt-0000000060" --out "$tmp/m.safetensors" > "$tmp/export.log" 2>&1 || { fail "export:"; indent < "$tmp/export.log"; exit 1; }
ours=$("$dt" eval --weights "$tmp/m.safetensors" 2>&1 | grep -o 'test accuracy [0-9.]*%')
theirs=$(OMP_NUM_THREADS=1 $py "$(dirname "$0")/../tools/torch_eval.py" "$tmp/m.safetensors" 2>&1)
[ "$ours" = "$theirs" ] && ok "dtrain: $ours; PyTorch: $theirs" || { fail "dtrain: $ours; PyTorch:"; indent <<<"$theirs"; }
# a description (batch norm, a residual, dropout) trained on 2 ranks, evaluated by
# the nn.Module tools/desc_torch.py builds from the same file (docs/MODELS.md's example)
cat > "$tmp/small.json" <<'J'
{"input": {"image": [1, 28, 28]}, "loss": "cross_entropy",
 "layers": [{"type": "sequential", "name": "features", "layers": [
              {"type": "conv2d", "name": "conv", "out": 8, "kernel": 3, "pad": 1, "bias": false},
              {"type": "batchnorm2d", "name": "bn", "sync": true}, {"type": "relu"}, {"type": "maxpool2d"}]},
            {"type": "residual", "name": "block", "layers": [{"type": "conv2d", "name": "conv", "out": 8, "kernel": 3, "pad": 1}, {"type": "silu"}]},
            {"type": "sequential", "layers": [{"type": "global_avgpool"}, {"type": "dropout", "p": 0.1}, {"type": "linear", "name": "head", "out": 10}]}]}
J
if run d -n 2 --model "$tmp/small.json" --steps 30 --batch 64 --quiet; then
  ours=$("$dt" eval --weights "$tmp/d/model.safetensors" 2>&1 | grep -o 'test accuracy [0-9.]*%')
  theirs=$(OMP_NUM_THREADS=1 $py "$(dirname "$0")/../tools/torch_eval.py" "$tmp/d/model.safetensors" 2>&1)
  [ -n "$ours" ] && [ "$ours" = "$theirs" ] && ok "description: dtrain $ours; PyTorch $theirs" || { fail "description: dtrain $ours; PyTorch:"; indent <<<"$theirs"; }
fi
finish
