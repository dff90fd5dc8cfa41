# What the driver answers about addresses in memory mapped by cuMemMap (virtual memory
# management): the runtime's allocation checks depend on it. On the GPU machine:
#   python3 bench/vmm_probe.py
import os
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
import ctypes
import torch
torch.zeros(1, device="cuda")  # primary context current
cu = ctypes.CDLL("libcuda.so.1")
u64 = ctypes.c_uint64

class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("handles", ctypes.c_int), ("loc", Loc),
                ("win32", ctypes.c_void_p), ("flags", ctypes.c_uint8 * 8)]
class Access(ctypes.Structure):
    _fields_ = [("loc", Loc), ("flags", ctypes.c_int)]

def ok(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what} -> {rc}")

prop = Prop(1, 0, Loc(1, 0), None)
gran = ctypes.c_size_t()
ok(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
chunk = gran.value
va = u64()
ok(cu.cuMemAddressReserve(ctypes.byref(va), ctypes.c_size_t(16 * chunk), ctypes.c_size_t(0), u64(0), u64(0)), "reserve")
for i in range(2):
    h = u64()
    ok(cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(chunk), ctypes.byref(prop), u64(0)), "create")
    ok(cu.cuMemMap(u64(va.value + i * chunk), ctypes.c_size_t(chunk), ctypes.c_size_t(0), h, u64(0)), "map")
acc = Access(Loc(1, 0), 3)
ok(cu.cuMemSetAccess(va, ctypes.c_size_t(2 * chunk), ctypes.byref(acc), ctypes.c_size_t(1)), "access")

ATTRS = {"MEMORY_TYPE": 2, "ORDINAL": 9, "RANGE_START": 11, "RANGE_SIZE": 12, "MAPPED": 13,
         "MAPPING_SIZE": 18, "MAPPING_BASE": 19, "BLOCK_ID": 20}
def describe(label, base, p):
    out = []
    for name, a in ATTRS.items():
        v = u64(0)
        rc = cu.cuPointerGetAttribute(ctypes.byref(v), ctypes.c_int(a), u64(p))
        val = v.value - base if name in ("RANGE_START", "MAPPING_BASE") and rc == 0 and v.value else v.value
        out.append(f"{name}={'rc%d' % rc if rc else val}")
    s, n = u64(), ctypes.c_size_t()
    rc = cu.cuMemGetAddressRange_v2(ctypes.byref(s), ctypes.byref(n), u64(p))
    out.append(f"GetAddressRange={'rc%d' % rc if rc else (s.value - base, n.value)}")
    h = u64()
    rc = cu.cuMemRetainAllocationHandle(ctypes.byref(h), ctypes.c_void_p(p))
    out.append(f"Retain=rc{rc}")
    if rc == 0:
        cu.cuMemRelease(h)
    print(f"{label:>28}: " + " ".join(out))

print("granularity", chunk)
b = va.value
for label, off in [("chunk0 first", 0), ("chunk0 last", chunk - 1), ("chunk1 first", chunk),
                   ("chunk1 last", 2 * chunk - 1), ("unmapped first", 2 * chunk),
                   ("unmapped mid", 5 * chunk + 7), ("reservation last", 16 * chunk - 1)]:
    describe(label, b, b + off)
x = torch.empty(3 << 20, device="cuda", dtype=torch.float32)  # 12 MB
y = torch.empty(40 << 20, device="cuda", dtype=torch.float32)  # 160 MB, spans chunks
for name, t in (("x", x), ("y", y)):
    p = t.data_ptr(); n = t.numel() * 4
    for label, off in [("first", 0), ("+20MB", 20 << 20), ("last", n - 1), ("+n", n), ("+n+64MB", n + (64 << 20))]:
        describe(f"torch {name} {label}", p, p + off)
