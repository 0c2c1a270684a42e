"""dtrain from Python: the same runs as the command line, through its library.

    import dtrain
    r = dtrain.train(model="mlp", steps=100, out="run", on_step=lambda s: print(s["step"], s["loss"]))
    w = dtrain.load_weights("run/model.safetensors")      # {name: numpy array}

train() runs in this process on one rank (the library's dt_train_flags_run,
over ctypes): keyword arguments are `dtrain train`'s flags with '_' for '-'
(lr=0.05, n_layer=2, lr_schedule="constant"; True for a bare switch, a list
repeats a flag), and the run is the command line's, bit for bit. data may be
a path, or NumPy arrays (x, y) or {"x": x, "y": y}, written to a temporary
folder of .npy files. launch(n=2, ...) runs `dtrain train -n 2 ...` through
the command line's launcher. Errors raise DtrainError with the library's one
line, the same the command line prints.
"""
import ctypes
import json
import os
import shutil
import struct
import subprocess
import tempfile

from . import _paths

__all__ = ["DtrainError", "train", "launch", "load_weights", "state_dict", "flags_to_argv"]


class DtrainError(Exception):
    """A run or its flags failed; str() is dtrain's one-line message."""


_lib = None
_STEP_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)


def _library():
    global _lib
    if _lib is None:
        if not os.path.exists(_paths.LIBRARY):
            raise DtrainError("%s is missing: run `make` in the dtrain checkout" % _paths.LIBRARY)
        lib = ctypes.CDLL(_paths.LIBRARY)
        lib.dt_train_flags_run.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, _STEP_FN,
                                           ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.dt_train_flags_run.restype = ctypes.c_int
        lib.dt_error_msg.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def flags_to_argv(**flags):
    """`dtrain train`'s flags from keyword arguments: lr=0.1 -> ['--lr', '0.1'],
    quiet=True -> ['--quiet'] (False or None: left out), inject=[a, b] -> twice."""
    argv = []
    for key, value in flags.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            argv += [flag, v if isinstance(v, str) else repr(v) if isinstance(v, float) else str(v)]
    return argv


def _data_folder(data, keep):
    """A path as it is; arrays into a temporary folder of x.npy and y.npy."""
    if data is None or isinstance(data, (str, os.PathLike)):
        return data, None
    import numpy as np
    if isinstance(data, dict):
        x, y = data.get("x"), data.get("y")
    else:
        x, y = data
    folder = tempfile.mkdtemp(prefix="dtrain-data-")
    keep.append(folder)
    np.save(os.path.join(folder, "x.npy"), np.ascontiguousarray(x))
    np.save(os.path.join(folder, "y.npy"), np.ascontiguousarray(y))
    return folder, folder


def train(model=None, data=None, out=None, on_step=None, threads=0, **flags):
    """Trains as `dtrain train` does on one rank and returns the result as a
    dict (steps, final_loss, test_acc, eval_loss, items_per_s, seconds, ...).
    on_step(figures) gets every logged step's metrics.jsonl line as a dict;
    returning a true value, or raising, stops the run (DtrainError)."""
    keep = []
    try:
        folder, _ = _data_folder(data, keep)
        argv = flags_to_argv(model=model, data=None if folder is None else str(folder),
                             out=None if out is None else str(out), **flags)
        lib = _library()
        raised = []

        def step(_ctx, line):
            try:
                return 1 if on_step(json.loads(line.decode())) else 0
            except BaseException as e:  # stop the run, re-raise below
                raised.append(e)
                return 1

        cb = _STEP_FN(step) if on_step else ctypes.cast(None, _STEP_FN)
        args = (ctypes.c_char_p * len(argv))(*[a.encode() for a in argv])
        summary = ctypes.create_string_buffer(4096)
        st = lib.dt_train_flags_run(len(argv), args, int(threads), cb, None, summary, len(summary))
        if raised:
            raise raised[0]
        if st != 0:
            raise DtrainError(lib.dt_error_msg().decode())
        return json.loads(summary.value.decode())
    finally:
        for folder in keep:
            shutil.rmtree(folder, ignore_errors=True)


def launch(n=2, model=None, data=None, out=None, **flags):
    """`dtrain train -n N ...` through the command line's launcher (mpirun);
    returns its summary line. A failure raises DtrainError with its message."""
    keep = []
    try:
        folder, _ = _data_folder(data, keep)
        argv = [_paths.CLI, "train", "-n", str(int(n))] + flags_to_argv(
            model=model, data=None if folder is None else str(folder), out=None if out is None else str(out), **flags)
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            lines = [l for l in p.stderr.splitlines() if l.strip()]
            msg = lines[-1] if lines else "dtrain train exited %d" % p.returncode
            for head in ("dtrain train: ", "dtrain[0]: "):  # the command line's framing of the library's line
                msg = msg[len(head):] if msg.startswith(head) else msg
            raise DtrainError(msg.replace(" (see 'dtrain train --help')", ""))
        return p.stdout.strip()
    finally:
        for folder in keep:
            shutil.rmtree(folder, ignore_errors=True)


_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": None, "F64": "<f8", "I64": "<i8", "I32": "<i4", "U8": "u1"}


def load_weights(path):
    """A safetensors file (a run's model.safetensors) as {name: numpy array}."""
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise DtrainError("%s: not a safetensors file (%d bytes)" % (path, len(raw)))
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise DtrainError("%s: header of %d bytes runs past the end of the file" % (path, n))
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise DtrainError("%s: header is not JSON (%s)" % (path, e))
    out, base = {}, 8 + n
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        if t["dtype"] == "BF16":
            bits = np.frombuffer(raw[base + lo:base + hi], dtype="<u2").astype(np.uint32) << 16
            a = bits.view(np.float32)
        elif t["dtype"] in _DTYPES:
            a = np.frombuffer(raw[base + lo:base + hi], dtype=_DTYPES[t["dtype"]])
        else:
            raise DtrainError("%s: tensor %s has dtype %s, which load_weights does not read" % (path, name, t["dtype"]))
        out[name] = a.reshape(t["shape"]).copy()
    return out


def state_dict(path):
    """The weights as a PyTorch state dict (needs torch); names are PyTorch's."""
    import torch
    return {k: torch.from_numpy(v) for k, v in load_weights(path).items()}
