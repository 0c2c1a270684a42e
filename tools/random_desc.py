"""Random valid model descriptions (docs/MODELS.md) for checking the C
compiler and layers against PyTorch: depth, widths, layer types, residuals,
repeats and ties drawn from a seed. tools/gen_fixture_models.py --random N
writes one fixture each; tests/test_desc_reference.c FILE checks one.

    /usr/bin/python3 tools/random_desc.py SEED      # print one
"""
import json
import random
import sys


def _dense(r, C, names):
    """A residual-safe stack on (..., C) rows: norms, activations, linears back to C."""
    body = []
    kind = r.choice(["layernorm", "rmsnorm", "none"])
    if kind != "none":
        body.append({"type": kind, "name": names()})
    H = r.choice([8, 12, 16, 20])
    if r.random() < 0.3:
        body.append({"type": "swiglu", "name": names(), "hidden": H})
        return body
    body.append({"type": "linear", "name": names(), "out": H, "bias": r.random() < 0.7,
                 "activation": r.choice(["none", "relu"])})
    act = r.choice(["gelu", "silu", "tanh", "relu", None])
    if act:
        body.append({"type": act})
    body.append({"type": "linear", "name": names(), "out": C, "bias": r.random() < 0.7})
    return body


def _tokens(r, names):
    T, C, V = r.choice([4, 6, 8]), r.choice([8, 16]), 32
    layers = [{"type": "embedding", "name": "emb", "num": V, "dim": C}]
    if r.random() < 0.5:
        layers[0] = {"type": "sequential", "layers": [layers[0], {"type": "pos_embedding", "name": "pos"}]}
    for _ in range(r.randint(1, 2)):
        nh = r.choice([1, 2, 4])
        nkv = r.choice([k for k in (1, 2, 4) if nh % k == 0])
        hs = r.choice([2, 4])
        att = [{"type": "rmsnorm", "name": names()},
               {"type": "linear", "name": names(), "out": (nh + 2 * nkv) * hs, "bias": r.random() < 0.5},
               {"type": "attention", "heads": nh, "kv_heads": nkv, "rope": r.random() < 0.6},
               {"type": "linear", "name": names(), "out": C}]
        layers.append({"type": "residual", "layers": att})
        layers.append({"type": "residual", "layers": _dense(r, C, names)})
    head = {"type": "linear", "name": "head", "out": V, "bias": False}
    if r.random() < 0.5:
        head["tie"] = "emb.weight"
    layers.append(head)
    return {"input": {"tokens": T, "vocab": V}, "loss": "cross_entropy", "layers": layers}


def _image(r, names):
    C0, H = r.choice([1, 2]), r.choice([8, 10])
    ch = r.choice([2, 3, 4])
    layers = [{"type": "conv2d", "name": names(), "out": ch, "kernel": 3, "pad": 1, "bias": r.random() < 0.5,
               "activation": r.choice(["none", "relu"])}]
    if r.random() < 0.6:
        layers.append({"type": "batchnorm2d", "name": names(), "momentum": 0.1})
    layers.append({"type": r.choice(["relu", "silu", "tanh"])})
    res = [{"type": "conv2d", "name": names(), "out": ch, "kernel": 3, "pad": 1}]
    if r.random() < 0.5:
        res.append({"type": "batchnorm2d", "name": names()})
    layers.append({"type": "repeat", "name": "blk", "count": r.randint(1, 2), "layers": [{"type": "residual", "layers": res}]})
    pool = r.choice(["max", "avg", "gap"])
    if pool == "max":
        layers += [{"type": "maxpool2d"}, {"type": "flatten"}]
    elif pool == "avg":
        layers += [{"type": "avgpool2d", "kernel": 3, "stride": 2, "pad": 1}, {"type": "flatten"}]
    else:
        layers.append({"type": "global_avgpool"})
    layers.append({"type": "linear", "name": "fc", "out": r.choice([3, 5])})
    return {"input": {"image": [C0, H, H]}, "loss": "cross_entropy", "layers": layers}


def _features(r, names):
    D = r.choice([5, 9, 16])
    layers = [{"type": "linear", "name": names(), "out": 12, "activation": r.choice(["none", "relu"])}]
    if r.random() < 0.5:
        layers.append({"type": "batchnorm1d", "name": names()})
    layers.append({"type": r.choice(["tanh", "silu", "gelu"])})
    for _ in range(r.randint(0, 2)):
        layers.append({"type": "residual", "layers": _dense(r, 12, names)})
    mse = r.random() < 0.5
    layers.append({"type": "linear", "name": "out", "out": r.choice([1, 3]) if mse else 4})
    return {"input": {"features": D}, "loss": "mse" if mse else "cross_entropy", "layers": layers}


def draw(seed):
    r = random.Random(seed)
    n = [0]

    def names():
        n[0] += 1
        return f"l{n[0]}"
    kind = r.choice([_tokens, _image, _features])
    d = kind(r, names)
    d["vars"] = {}
    d["name"] = f"random{seed}"
    return d


if __name__ == "__main__":
    print(json.dumps(draw(int(sys.argv[1]) if len(sys.argv) > 1 else 1), indent=1))
