#!/usr/bin/env python3
"""runtime/python/autotune_runtime.py builds its args structs from the library's own
description (autotune_describe_args); they must lay out exactly like the C ABI's
(tests/abi_offsets.c prints those): same size, same field order and offsets.
Usage: check_python_abi.py PATH/TO/abi_offsets PATH/TO/libautotune.so"""
import ctypes
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "python"))
import autotune_runtime  # noqa: E402

c_layout = json.loads(subprocess.check_output([sys.argv[1]], text=True))
lib = ctypes.CDLL(sys.argv[2])
lib.autotune_describe_args.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint64]
lib.autotune_last_error.restype = ctypes.c_char_p
failures = []
for op, c in c_layout.items():
    text = ctypes.create_string_buffer(4096)
    if lib.autotune_describe_args(op.encode(), text, len(text)) != 0:
        failures.append(f"{op}: {lib.autotune_last_error().decode()}")
        continue
    layout = autotune_runtime.ArgsLayout(text.value.decode())
    if layout.size != c["size"]:
        failures.append(f"{op}: described size {layout.size} != C size {c['size']}")
    if list(layout.offsets) != list(c["fields"]):
        failures.append(f"{op}: field order differs: {list(layout.offsets)} vs {list(c['fields'])}")
    for field, offset in c["fields"].items():
        if layout.offsets.get(field) != offset:
            failures.append(f"{op}.{field}: described offset {layout.offsets.get(field)} != C {offset}")
    if layout.struct.size > c["size"]:
        failures.append(f"{op}: the packed struct ({layout.struct.size} bytes) overruns the C one")
if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"{len(c_layout)} structs match the C ABI")
