#!/usr/bin/python3
"""PyTorch side of the dtrain speed benchmark (bench/run.sh runs both).

The same three workloads as bench/bench_train.c, with the same step structure
(zero_grad(set_to_none=True), forward, mean cross-entropy, backward,
optimizer.step()), the same synthetic fixed batch, warm-up and timing rule,
on ONE thread. Prints human lines and machine-readable `RESULT` lines:

    RESULT peak torch matmul_gflops=...
    RESULT W1 torch samples_per_s=... ms_per_step=... steps=...

usage: /usr/bin/python3 bench/torch_bench.py [--only W1,W2,W3,peak] [--seconds S] [--warmup N]
"""
import os

# One thread for real: these must be set before torch (and its BLAS/OpenMP
# runtimes) is imported; torch.set_num_threads(1) below covers intra-op pools.
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from torch_models import CNN, GPT, MLP, mean_xent  # noqa: E402

torch.set_num_threads(1)
torch.set_num_interop_threads(1)


# ---- models (tools/torch_models.py) -------------------------------------------------

def nanogpt_init(model, n_layer):
    """nanoGPT's initialisation: N(0, 0.02) for linear and embedding weights,
    zero biases, and N(0, 0.02/sqrt(2L)) for the projections into the residual
    stream (c_proj)."""
    for mod in model.modules():
        if isinstance(mod, nn.Linear):
            nn.init.normal_(mod.weight, 0.0, 0.02)
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)
        elif isinstance(mod, nn.Embedding):
            nn.init.normal_(mod.weight, 0.0, 0.02)
    for n, p in model.named_parameters():
        if n.endswith("c_proj.weight"):
            nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
    return model


# ---- workloads --------------------------------------------------------------------

def make_w1():
    g = torch.Generator().manual_seed(42)
    model = MLP(784, (1024, 1024), 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(128, 784, generator=g)
    y = torch.randint(0, 10, (128,), generator=g)
    return model, opt, x, y, 128, "samples"


def make_w2():
    g = torch.Generator().manual_seed(42)
    model = nanogpt_init(GPT(), n_layer=4)
    # nanoGPT's configure_optimizers: decay only tensors with dim >= 2.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    nodecay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.99))
    x = torch.randint(0, 256, (16, 128), generator=g)
    y = torch.randint(0, 256, (16, 128), generator=g)
    return model, opt, x, y, 16 * 128, "tokens"


def make_w3():
    g = torch.Generator().manual_seed(42)
    model = CNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(64, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (64,), generator=g)
    return model, opt, x, y, 64, "samples"


WORKLOADS = {"W1": make_w1, "W2": make_w2, "W3": make_w3}


def step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = mean_xent(model(x), y)
    loss.backward()
    opt.step()
    return loss


def run_workload(wid, seconds, warmup):
    model, opt, x, y, items_per_step, unit = WORKLOADS[wid]()
    model.train()
    t0 = time.perf_counter()
    for _ in range(warmup):
        step(model, opt, x, y)
    per = (time.perf_counter() - t0) / warmup
    steps = max(5, min(100000, int(seconds / max(per, 1e-6))))
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loss = step(model, opt, x, y)
    secs = time.perf_counter() - t0
    cores = (time.process_time() - c0) / secs  # about 1 on one thread
    step_s = secs / steps
    ips = items_per_step / step_s
    print(f"{wid}  torch {torch.__version__}: {steps} steps in {secs:.2f} s: "
          f"{1e3 * step_s:.2f} ms/step, {ips:.0f} {unit}/s (loss {loss.item():.4f}), cpu/wall {cores:.2f}")
    print(f"RESULT {wid} torch {unit}_per_s={ips:.1f} ms_per_step={1e3 * step_s:.4f} steps={steps} "
          f"cpu_per_wall={cores:.2f}")
    if cores > 1.3:
        print(f"WARNING: {wid} used {cores:.2f} cores' time; not a one-thread figure", file=sys.stderr)
        print("RESULT warn torch_multithreaded=1")
    sys.stdout.flush()


def matmul_peak(reps=8):
    n = 1024
    a = torch.rand(n, n) - 0.5
    b = torch.rand(n, n) - 0.5
    c = torch.empty(n, n)
    best = 1e30
    wall = cpu = 0.0
    for i in range(reps + 1):
        c0 = time.process_time()
        t0 = time.perf_counter()
        torch.matmul(a, b, out=c)
        t = time.perf_counter() - t0
        if i > 0:
            best = min(best, t)
            wall += t
            cpu += time.process_time() - c0
    # CPU time over wall time: about 1 on one thread, about 2 on two cores.
    return 2.0 * n ** 3 / best / 1e9, cpu / wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="peak,W1,W2,W3")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sgemm-peak", type=float, default=0.0,
                    help="dtrain's 1-thread sgemm GFLOP/s, to check torch is on one core")
    a = ap.parse_args()
    only = a.only.split(",")
    for w in only:
        if w != "peak" and w not in WORKLOADS:
            ap.error(f"--only takes W1,W2,W3,peak; got {w!r}")
    torch.manual_seed(0)
    peak, cores = matmul_peak()
    print(f"torch {torch.__version__}: threads={torch.get_num_threads()} "
          f"interop={torch.get_num_interop_threads()}, 1024^3 matmul {peak:.1f} GFLOP/s (best of 8), "
          f"cpu/wall {cores:.2f}")
    print(f"RESULT peak torch matmul_gflops={peak:.2f} threads={torch.get_num_threads()} cpu_per_wall={cores:.2f}")
    if cores > 1.3 or (a.sgemm_peak > 0 and peak > 1.5 * a.sgemm_peak):
        print(f"WARNING: torch's matmul ({peak:.0f} GFLOP/s, cpu/wall {cores:.2f}) looks like MORE THAN "
              f"ONE CORE (dtrain's one-thread sgemm: {a.sgemm_peak:.0f}); the comparison is invalid",
              file=sys.stderr)
        print("RESULT warn torch_multithreaded=1")
    sys.stdout.flush()
    for w in only:
        if w != "peak":
            run_workload(w, a.seconds, a.warmup)


if __name__ == "__main__":
    main()
