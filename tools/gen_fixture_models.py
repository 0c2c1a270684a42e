"""PyTorch fixtures for model descriptions (tests/test_desc_reference.c).

For each description: float32 weights under the description's tensor names, K
batches, the loss and every gradient of the first batch (float64 in PyTorch),
the losses of K steps of plain SGD (lr in the metadata) from those weights, and
the batch norm running statistics after them. The description travels in the
fixture's metadata, so the C test compiles exactly what PyTorch ran.

    /usr/bin/python3 tools/gen_fixture_models.py                # the shipped files, small sizes
    /usr/bin/python3 tools/gen_fixture_models.py --random N --out DIR [--seed S]
                                                                # N random descriptions (tools/random_desc.py)
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixturelib  # noqa: E402
from desc_torch import DescModel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
K, LR, B = 3, 0.05, 4


def load_desc(name, overrides):
    d = json.load(open(os.path.join(ROOT, "models", name + ".json")))
    d["vars"].update(overrides)
    return d


def init_weights(model, gen):
    """float32-representable draws with some spread on every path."""
    with torch.no_grad():
        for k, p in model.named_parameters():
            leaf = k.split(".")[-1]
            if p.dim() == 1 and ("norm" in k or "ln" in k or "bn" in k or "layernorm" in k) and leaf == "weight":
                v = 1.0 + torch.randn(p.shape, generator=gen) * 0.2
            elif p.dim() == 1:
                v = torch.randn(p.shape, generator=gen) * 0.1
            elif k.endswith("embed_tokens.weight") or k.endswith("wte.weight") or k.endswith("wpe.weight") or "emb" in k:
                v = torch.randn(p.shape, generator=gen) * 0.5
            else:
                fan_in = int(np.prod(p.shape[1:]))
                v = torch.randn(p.shape, generator=gen) / np.sqrt(fan_in)
            p.copy_(v.to(torch.float32).to(p.dtype))


def make_batch(model, gen, k):
    if model.tokens:
        T = model.in_shape[0]
        seq = torch.randint(0, 24, (B, T + 1), generator=gen)
        return {f"tokens.{k}": seq[:, :-1].to(torch.int32).numpy(), f"targets.{k}": seq[:, 1:].to(torch.int32).numpy()}
    x = torch.rand((B,) + model.in_shape, generator=gen).to(torch.float32)
    out = {f"x.{k}": x.numpy()}
    model.eval()  # shape probes must not move batch norm's running statistics
    if model.loss_kind == "mse":
        with torch.no_grad():
            y = model(x)
        out[f"y.{k}"] = (torch.randn(y.shape, generator=gen) * 0.5).to(torch.float32).numpy()
    else:
        with torch.no_grad():
            V = model(x).shape[-1]
        out[f"targets.{k}"] = torch.randint(0, V, (B,), generator=gen).to(torch.int32).numpy()
    return out


def inputs(model, batch, k):
    if model.tokens:
        return torch.from_numpy(batch[f"tokens.{k}"]).long(), torch.from_numpy(batch[f"targets.{k}"]).long()
    x = torch.from_numpy(batch[f"x.{k}"]).double()
    if model.loss_kind == "mse":
        return x, torch.from_numpy(batch[f"y.{k}"]).double()
    return x, torch.from_numpy(batch[f"targets.{k}"]).long()


def fixture(desc, path, seed):
    gen = torch.Generator().manual_seed(seed)
    model = DescModel(desc)
    init_weights(model, gen)
    # a batch norm's running statistics start where PyTorch's do (0, 1)
    t = {k: v.detach().to(torch.float32).numpy().copy() for k, v in model.state_dict().items()
         if not k.endswith("num_batches_tracked")}
    batch = {}
    for k in range(K):
        batch.update(make_batch(model, gen, k))
    model = model.double().train()
    losses = []
    for k in range(K):
        model.zero_grad()
        x, y = inputs(model, batch, k)
        loss = model.loss(model(x), y)
        loss.backward()
        losses.append(loss.item())
        if k == 0:
            t["loss"] = np.array([loss.item()], dtype=np.float32)
            for name, p in model.named_parameters():
                t["grad." + name] = p.grad.detach().to(torch.float32).numpy().copy()
        with torch.no_grad():
            for p in model.parameters():
                p -= LR * p.grad
    for name, v in model.state_dict().items():
        if name.endswith("running_mean") or name.endswith("running_var"):
            t["final." + name] = v.to(torch.float32).numpy().copy()
    t["losses"] = np.array(losses, dtype=np.float32)
    t.update(batch)
    fixturelib.save(path, t, {"desc": json.dumps(desc), "B": str(B), "K": str(K), "lr": str(LR)})


SHIPPED = [
    ("llama", {"n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_embd": 32, "ffn": 48, "block_size": 8}),
    ("resnet", {"w": 4, "blocks": 1}),
    ("gpt", {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8}),
    ("regressor", {"in": 6, "hidden": 12, "out": 2}),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--random", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures"))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    if a.random:
        import random_desc
        for i in range(a.random):
            d = random_desc.draw(a.seed * 100003 + i)
            fixture(d, os.path.join(a.out, f"ref_desc_random{i}.safetensors"), a.seed * 7919 + i)
        return
    for i, (name, over) in enumerate(SHIPPED):
        fixture(load_desc(name, over), os.path.join(a.out, f"ref_desc_{name}.safetensors"), 1000 + i)


if __name__ == "__main__":
    main()
