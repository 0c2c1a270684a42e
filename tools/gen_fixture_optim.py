"""Reference values for tests/test_optim.c from PyTorch (torch.optim.SGD and
AdamW with foreach=False, clip_grad_norm_) written to
tests/fixtures/optim.safetensors.

    /usr/bin/python3 tools/gen_fixture_optim.py

Hyperparameters are rounded to float32 before PyTorch sees them because
dtrain's configuration holds floats: any difference the C test finds is then
due to the arithmetic, not to 0.9 vs 0.9f."""
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib import save  # noqa: E402

N, STEPS = 1000, 5


def f32(x):
    return float(np.float32(x))


def lr_at(lr, min_lr, warmup, total, step):
    """The formula of include/dtrain/optim.h (dt_lr_at), cosine variant."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup * lr
    if total <= warmup:
        return min_lr
    p = min((step - warmup) / (total - warmup), 1.0)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * p)) * (lr - min_lr)


def run(p0, grads, make, lrs=None):
    p = torch.nn.Parameter(p0.clone())
    opt = make([p])
    out = []
    for k in range(STEPS):
        if lrs is not None:
            for group in opt.param_groups:
                group["lr"] = lrs[k]
        p.grad = grads[k].clone()
        opt.step()
        out.append(p.detach().clone())
    return torch.stack(out)


def main():
    torch.manual_seed(1234)
    p0 = torch.randn(N)
    grads = torch.randn(STEPS, N) * torch.linspace(0.01, 2.0, STEPS).unsqueeze(1)
    t = {"p0": p0, "grads": grads}

    SGD, AdamW = torch.optim.SGD, torch.optim.AdamW
    t["sgd_plain"] = run(p0, grads, lambda ps: SGD(ps, lr=f32(0.1), foreach=False))
    t["sgd_momentum"] = run(p0, grads, lambda ps: SGD(ps, lr=f32(0.05), momentum=f32(0.9),
                                                      foreach=False))
    t["sgd_nesterov_wd"] = run(p0, grads, lambda ps: SGD(
        ps, lr=f32(0.05), momentum=f32(0.9), nesterov=True, weight_decay=f32(0.01),
        foreach=False))
    adam = dict(betas=(f32(0.9), f32(0.999)), eps=f32(1e-8), foreach=False)
    t["adamw_default"] = run(p0, grads, lambda ps: AdamW(ps, lr=f32(1e-3), weight_decay=f32(0.01),
                                                         **adam))
    t["adamw_wd"] = run(p0, grads, lambda ps: AdamW(ps, lr=f32(1e-3), weight_decay=f32(0.1), **adam))

    # Schedule: peak 0.1, floor 0.01, 5 warm-up steps, 25 total; steps past the end.
    sched = [lr_at(0.1, 0.01, 5, 25, s) for s in range(30)]
    t["sched_lr"] = np.array([f32(x) for x in sched], dtype=np.float32)
    # AdamW driven by a short schedule (peak 1e-2, floor 1e-3, warm-up 2, total 5).
    lrs = [f32(lr_at(f32(1e-2), f32(1e-3), 2, 5, s)) for s in range(STEPS)]
    t["adamw_sched_lr"] = np.array(lrs, dtype=np.float32)
    t["adamw_sched"] = run(p0, grads, lambda ps: AdamW(ps, lr=lrs[0], weight_decay=f32(0.01), **adam),
                           lrs)

    # clip_grad_norm_ on each gradient with several max norms.
    max_norms = [f32(0.5), f32(10.0), f32(1e6)]
    norms, factors, clipped = [], [], []
    for k in range(STEPS):
        for mx in max_norms:
            p = torch.nn.Parameter(torch.zeros(N))
            p.grad = grads[k].clone()
            total = torch.nn.utils.clip_grad_norm_([p], mx)
            coef = torch.clamp(mx / (total + 1e-6), max=1.0)
            norms.append(float(total))
            factors.append(float(coef))
            clipped.append(p.grad.clone())
    t["clip_max_norm"] = np.array(max_norms, dtype=np.float32)
    t["clip_norm"] = np.array(norms, dtype=np.float32)
    t["clip_factor"] = np.array(factors, dtype=np.float32)
    t["clip_grads"] = torch.stack(clipped)

    here = os.path.dirname(os.path.abspath(__file__))
    save(os.path.join(here, "..", "tests", "fixtures", "optim.safetensors"), t,
         {"generator": "tools/gen_fixture_optim.py", "torch": torch.__version__})


if __name__ == "__main__":
    main()
