"""A small safetensors file written by Python (tools/fixturelib.py's save()) for
tests/test_safetensors.c: several dtypes and shapes, an empty tensor,
and metadata. The C test checks the values below.

    /usr/bin/python3 tools/gen_fixture_safetensors.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixturelib import save  # noqa: E402


def main():
    t = {
        "weight": np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5 - 1.0,  # (3, 4)
        "bias": np.array([1.5, -2.25], dtype=np.float64),                   # (2,)
        "ids": np.array([[-3, 7, 2**31 - 1]], dtype=np.int64),              # (1, 3)
        "count": np.array([42], dtype=np.int32),  # (1,): fixturelib cannot write 0-d
        "empty": np.zeros((0, 5), dtype=np.float32),                          # (0, 5)
        "bytes": np.array([0, 1, 255], dtype=np.uint8),                      # (3,)
    }
    here = os.path.dirname(os.path.abspath(__file__))
    save(os.path.join(here, "..", "tests", "fixtures", "st_python.safetensors"), t,
         {"format": "pt", "note": "written by numpy"})


if __name__ == "__main__":
    main()
