"""Writes reference fixtures as safetensors files (no dependency beyond numpy),
so the C tests read them with dtrain's own safetensors reader.

Used only to regenerate tests/fixtures/ with Debian's python3-torch:
    /usr/bin/python3 tools/gen_fixtures.py
"""
import json
import struct

import numpy as np

_DTYPES = {np.dtype("float32"): "F32", np.dtype("float64"): "F64",
           np.dtype("int32"): "I32", np.dtype("int64"): "I64", np.dtype("uint8"): "U8"}


def save(path, tensors, metadata=None):
    """tensors: dict name -> numpy array (or torch tensor). Written in the
    order given, C-contiguous little-endian, header padded to 8 bytes."""
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        if hasattr(arr, "detach"):
            arr = arr.detach().cpu().numpy()
        arr = np.ascontiguousarray(arr)
        if arr.dtype not in _DTYPES:
            raise TypeError(f"{name}: unsupported dtype {arr.dtype}")
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _DTYPES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    """Reads a safetensors file into a dict of numpy arrays plus metadata."""
    inv = {v: k for k, v in _DTYPES.items()}
    inv["F16"] = np.dtype("float16")
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(raw[base + b:base + e], dtype=inv[info["dtype"]].newbyteorder("<")).reshape(info["shape"]).copy()
    return out, meta
