"""Loads a dtrain weights file into PyTorch modules written the usual way and
evaluates it on the Fashion-MNIST test set with torchvision-style ToTensor()
inputs (x/255), printing "test accuracy XX.XX%". Shows that exported weights
need no conversion. Run with Debian's python3-torch:
    /usr/bin/python3 tools/torch_eval.py model.safetensors [DATA_DIR]
A model trained from a description file (--model FILE.json or a shipped name,
with its --set, both in the file's metadata) is built by tools/desc_torch.py;
pass --desc FILE.json when the description is not where the run found it.
"""
import json
import gzip
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixturelib  # noqa: E402
from desc_torch import DescModel  # noqa: E402
from torch_models import CNN, MLP  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def described(kind, meta, given):
    """The DescModel of a description file, its variables set as the run set them."""
    path = given or (kind if os.path.exists(kind) else os.path.join(ROOT, "models", kind + ".json"))
    over = {}
    for kv in filter(None, meta.get("model_set", "").split(",")):
        k, v = kv.split("=", 1)
        over[k] = [int(x) for x in v.split(":")] if ":" in v else (float(v) if any(c in v for c in ".eE") else int(v))
    return DescModel(json.load(open(path)), over).eval()


def read_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


def find(d, name):
    for cand in (name, name + ".gz"):
        p = os.path.join(d, cand)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(name)


def main():
    args = sys.argv[1:]
    desc = None
    if "--desc" in args:
        i = args.index("--desc")
        desc = args[i + 1]
        del args[i:i + 2]
    path = args[0]
    data = args[1] if len(args) > 1 else "/usr/share/datasets/fashion-mnist"
    tensors, meta = fixturelib.load(path)
    kind = meta.get("dtrain_model")
    if kind == "mlp":
        hidden = [int(h) for h in meta["hidden"].split(",") if h]
        model = MLP(int(meta["in_dim"]), hidden, int(meta["n_classes"]))
    elif kind == "cnn":
        model = CNN()
    elif kind:
        model = described(kind, meta, desc)
    else:
        sys.exit(f"{path}: the file does not say which model it holds")
    # batch norm's num_batches_tracked is PyTorch's only (read when momentum is None)
    strict = not any(k.endswith("running_mean") for k in tensors)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=strict)
    x = torch.from_numpy(read_idx(find(data, "t10k-images-idx3-ubyte")).astype(np.float32) / 255.0).unsqueeze(1)
    y = torch.from_numpy(read_idx(find(data, "t10k-labels-idx1-ubyte")).astype(np.int64))
    with torch.no_grad():
        pred = model(x).argmax(1)
    print(f"test accuracy {100.0 * (pred == y).float().mean().item():.2f}%")


if __name__ == "__main__":
    main()
