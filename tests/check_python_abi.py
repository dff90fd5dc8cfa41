#!/usr/bin/env python3
"""The ctypes structs of runtime/python/autotune_runtime.py must lay out exactly
like the C ABI's (tests/abi_offsets.c prints those): same size, same offsets, same
field order. Usage: check_python_abi.py PATH/TO/abi_offsets"""
import ctypes
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "python"))
import autotune_runtime  # noqa: E402

STRUCTS = {"causal_conv1d": autotune_runtime.CausalConv1dArgs,
           "attention": autotune_runtime.AttentionArgs,
           "selective_scan": autotune_runtime.SelectiveScanArgs}

c_layout = json.loads(subprocess.check_output([sys.argv[1]], text=True))
failures = []
for name, struct in STRUCTS.items():
    c = c_layout[name]
    if ctypes.sizeof(struct) != c["size"]:
        failures.append(f"{name}: ctypes size {ctypes.sizeof(struct)} != C size {c['size']}")
    py_fields = [f[0] for f in struct._fields_]
    if py_fields != list(c["fields"]):
        failures.append(f"{name}: field order differs: {py_fields} vs {list(c['fields'])}")
    for field, offset in c["fields"].items():
        if field in py_fields and getattr(struct, field).offset != offset:
            failures.append(f"{name}.{field}: ctypes offset {getattr(struct, field).offset} != C {offset}")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"{len(STRUCTS)} structs match the C ABI")
