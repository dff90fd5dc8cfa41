"""ctypes bindings of libautotune.so's C ABI (runtime/dispatch/autotune.h). Nothing is
compiled against torch and nothing is JIT-compiled in Python: a call packs each tensor
as (pointer, dtype, shape, strides) into the op's args struct and the library checks
every one of them before anything launches. Kernels run on torch's current stream in
the device's primary CUDA context (the one torch uses).

    from autotune import Runtime            # or: import autotune_runtime (runtime/python)
    rt = Runtime()                          # libautotune.so found as autotune._library says
    out = rt.causal_conv1d(x, weight, bias, silu=True)
    o = rt.attention(q, k, v, causal=True)  # [B, S, H, D] or layout="bhsd"
    y = rt.selective_scan(u, delta, A, B, C, D=D, z=z, delta_bias=bias)

The args structs' layouts come from the library itself (autotune_describe_args), so
this file holds no copy of the C header to keep in step. torch is imported lazily: the
module loads (and describes the library) without it.
"""
import collections
import ctypes
import math
import struct
import threading
import weakref

from . import _library

AUTOTUNE_FP32, AUTOTUNE_FP16, AUTOTUNE_BF16 = 0, 1, 2
AUTOTUNE_INT32 = 3  # index tensors (attention's cu_seqlens, cache_seqlens, cache_leftpad, ...)
MAX_DIMS = 4
OPS = ("causal_conv1d", "attention", "selective_scan", "causal_conv1d_update",
       "selective_state_update")

# struct-module codes of each field kind of autotune_describe_args (native alignment).
_KIND_FORMAT = {"tensor": "Pii4q4q", "i32": "i", "f64": "d", "ptr": "P", "u64": "Q"}
_ABSENT = (0, 0, 0) + (0,) * (2 * MAX_DIMS)
_PAD = [(0,) * (MAX_DIMS - n) for n in range(MAX_DIMS + 1)]


class AutotuneError(RuntimeError):
    """A call the library refused (the message names the argument) or a runtime failure.
    status: the C ABI's autotune_status (1 invalid argument, 2 no device, 3 CUDA, 4
    database, 5 not tuned, 6 internal)."""

    def __init__(self, status, message):
        super().__init__(f"{message} (status {status})")
        self.status = status


class ArgsLayout:
    """An op's args struct as the library describes it: field names and kinds in
    order, a struct.Struct that packs them, and the size of the C struct."""

    def __init__(self, text):
        self.fields, self.rules = [], []
        lines = iter(text.splitlines())
        for line in lines:
            name, kind_or_size, *rest = line.split()
            if name == "size":
                self.size = int(kind_or_size)
                break
            self.fields.append((name, kind_or_size, int(rest[0])))
        next(lines)  # "rules"
        self.rules = list(lines)
        fmt = "@"
        for name, kind, offset in self.fields:
            # Native alignment pads before each item as C does: the field starts where
            # its first item lands.
            first = _KIND_FORMAT[kind][0]
            if struct.calcsize(fmt + first) - struct.calcsize(first) != offset:
                raise RuntimeError(f"autotune: field {name} is not at offset {offset} here")
            fmt += _KIND_FORMAT[kind]
        if struct.calcsize(fmt) > self.size:
            raise RuntimeError("autotune: the described fields overrun the struct")
        self.struct = struct.Struct(fmt)
        self.offsets = {name: offset for name, _, offset in self.fields}
        # Where the data pointers are, in 8-byte words (a warm call rewrites only these,
        # through a memoryview of the struct as 64-bit words).
        if ctypes.sizeof(ctypes.c_void_p) != 8:
            raise RuntimeError("autotune: a 64-bit process is needed")
        self.pointer_slots = tuple(offset // 8 for name, kind, offset in self.fields
                                   if kind == "tensor")
        if any(offset % 8 for name, kind, offset in self.fields if kind == "tensor"):
            raise RuntimeError("autotune: a tensor field is not 8-byte aligned")
        self.kinds = {name: kind for name, kind, _ in self.fields}

    def pointer_slots_of(self, names):
        """The 8-byte words of the data pointers of the named tensor fields, in that order
        (a KeyError or ValueError names a field the library does not describe as a tensor)."""
        for name in names:
            if self.kinds[name] != "tensor":
                raise ValueError(f"autotune: field {name} is a {self.kinds[name]}, not a tensor")
        return tuple(self.offsets[name] // 8 for name in names)


_CODES = {}


def _codes():
    import torch
    _CODES.update({torch.float32: AUTOTUNE_FP32, torch.float16: AUTOTUNE_FP16,
                   torch.bfloat16: AUTOTUNE_BF16})


def dtype_code(dtype, what="tensor"):
    code = _CODES.get(dtype)
    if code is None:
        if getattr(dtype, "is_complex", False):
            raise TypeError(f"autotune: {what} is complex ({dtype}); autotune's kernels are "
                            "real-valued (float32, float16 or bfloat16)")
        _codes()
        code = _CODES.get(dtype)
        if code is None:
            raise TypeError(f"autotune: {what} has dtype {dtype}; expected float32, float16 "
                            "or bfloat16")
    return code


def scale_field(scale):
    """The attention struct's scale for a softmax_scale: None is 1/sqrt(D) (0 in the
    struct); anything else must be a positive, finite number (flash-attn would compute with
    0 or a negative scale; the kernels do not, so they are refused, never replaced)."""
    if scale is None:
        return 0.0
    value = float(scale)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"autotune: softmax_scale must be positive and finite, or None "
                         f"(1/sqrt(headdim)), not {scale}")
    return value


def tensor_fields(t, what="tensor"):
    """The autotune_tensor fields of a torch tensor (None: absent)."""
    if t is None:
        return _ABSENT
    try:
        shape = t.shape
        ptr = t.data_ptr()
    except AttributeError:
        raise TypeError(f"autotune: {what} must be a torch.Tensor, not "
                        f"{type(t).__name__}") from None
    n = len(shape)
    if n > MAX_DIMS or n == 0 or not ptr:
        _refuse_fields(t, what, n)
    pad = _PAD[n]
    return (ptr, dtype_code(t.dtype, what), n, *shape, *pad, *t.stride(), *pad)


def _refuse_fields(t, what, n):
    if n > MAX_DIMS or n == 0:
        raise ValueError(f"autotune: {what} has {n} dimensions (1 to {MAX_DIMS})")
    # A null pointer would read as an absent optional tensor: refuse it instead.
    raise ValueError(f"autotune: {what} has no data (an empty or meta tensor: shape "
                     f"{list(t.shape)}, device {t.device})")


def attention_fields(t, what, bhsd=False):
    """The autotune_tensor fields of q, k, v or o indexed [B, H, S, D]: a [B, S, H, D]
    tensor (bhsd False) is passed with its dimensions 1 and 2 swapped, no view made."""
    if t is None or bhsd:
        return tensor_fields(t, what)
    try:
        shape = t.shape
        ptr = t.data_ptr()
    except AttributeError:
        raise TypeError(f"autotune: {what} must be a torch.Tensor, not "
                        f"{type(t).__name__}") from None
    if len(shape) != 4 or not ptr:
        if len(shape) == 4:
            _refuse_fields(t, what, 4)
        raise ValueError(f"autotune: {what} must be [batch, seqlen, heads, headdim], not "
                         f"{list(shape)}")
    b, s, h, d = shape
    sb, ss, sh, sd = t.stride()
    return (ptr, dtype_code(t.dtype, what), 4, b, h, s, d, sb, sh, ss, sd)


NO_WINDOW = (-1, -1)  # flash-attn's window_size for no window


def index_fields(t, what, peer_name="cu_seqlens", peer="flash-attn"):
    """The autotune_tensor fields of an int32 index tensor (cu_seqlens): a CUDA torch.int32
    tensor, 1-d and contiguous; anything else raises naming it (and peer_name, the peer's
    argument whose dtype it takes)."""
    try:
        dtype, shape, device = t.dtype, tuple(t.shape), t.device
    except AttributeError:
        raise TypeError(f"autotune: {what} must be a torch.Tensor of int32, not "
                        f"{type(t).__name__}") from None
    if str(dtype) != "torch.int32":
        raise TypeError(f"autotune: {what} has dtype {dtype}; expected torch.int32 ({peer}'s "
                        f"{peer_name} dtype)")
    if len(shape) != 1:
        size = "batch_size + 1" if peer_name == "cu_seqlens" else "batch_size"
        raise ValueError(f"autotune: {what} must be 1-d ({size},), not {list(shape)}")
    if getattr(device, "type", "cuda") != "cuda":
        raise ValueError(f"autotune: {what} is on {device}; it must be a CUDA tensor (the kernel "
                         "reads the offsets on the GPU)")
    if shape[0] > 1 and t.stride()[0] != 1:
        raise ValueError(f"autotune: {what} must be contiguous")
    ptr = t.data_ptr()
    if not ptr:
        _refuse_fields(t, what, 1)
    return (ptr, AUTOTUNE_INT32, 1, shape[0], 0, 0, 0, 1, 0, 0, 0)


def sequence_index_fields(t, what, peer="causal-conv1d"):
    """A decoding step's per-sequence int32 tensor (causal_conv1d_update's cache_seqlens and
    conv_state_indices, selective_state_update's state_batch_indices): (batch,) on the GPU,
    or absent fields for None."""
    return _ABSENT if t is None else index_fields(t, what, what, peer)


NO_VARLEN = _ABSENT + _ABSENT + (0, 0)  # a call without variable-length sequences


def varlen_fields(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """The fields of a variable-length call (flash-attn's varlen): int32 offsets [B + 1] on
    the GPU, and the longest query and key sequences (ints >= 1)."""
    for name, n in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if isinstance(n, bool) or not isinstance(n, int) and not hasattr(n, "__index__"):
            raise TypeError(f"autotune: {name} must be an int, not {type(n).__name__}")
        if not 1 <= int(n) < 2**31:
            raise ValueError(f"autotune: {name}={int(n)} must be in 1 .. 2^31 - 1")
    return (*index_fields(cu_seqlens_q, "cu_seqlens_q"), *index_fields(cu_seqlens_k, "cu_seqlens_k"),
            int(max_seqlen_q), int(max_seqlen_k))


def check_varlen_tensors(q, k, v, paged=False):
    """q, k, v of a variable-length call: 3-d (total_tokens, nheads, headdim) CUDA tensors;
    paged: k, v 4-d (num_blocks, page_block_size, nheads_k, headdim), a paged KV cache."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        shape = getattr(t, "shape", None)
        if shape is None:
            raise TypeError(f"autotune: {name} must be a torch.Tensor, not {type(t).__name__}")
        if paged and name != "q":
            if len(shape) != 4:
                raise ValueError(f"autotune: {name} must be (num_blocks, page_block_size, "
                                 f"nheads_k, headdim) with a block_table, not {list(shape)}")
        elif len(shape) != 3:
            raise ValueError(f"autotune: {name} must be (total_tokens, nheads, headdim) for "
                             f"variable-length batches, not {list(shape)}")
        if not t.is_cuda:
            raise ValueError(f"autotune: {name} is on {t.device}; autotune's kernels take CUDA "
                             "tensors")


def _slopes_key(alibi_slopes):
    return None if alibi_slopes is None else (tuple(alibi_slopes.shape), alibi_slopes.dtype)


# The stream key of the workspaces that calls captured in CUDA graphs use (no stream's).
_GRAPHS = -1
# Streams' workspaces kept per Runtime (streams x sizes; a program making a stream per
# request would otherwise keep one per stream it ever used). The graphs' are apart and all
# kept: captured graphs hold their pointers.
_MAX_WORKSPACES = 64
NO_KVCACHE = _ABSENT * 6


def kvcache_fields(cache_seqlens, block_table=None, k_new=None, v_new=None, cache_leftpad=None,
                   cache_batch_idx=None):
    """The fields of a KV-cache call (flash-attn's flash_attn_with_kvcache): int32
    cache_seqlens (B,) and block_table (B, max_blocks_per_seq) on the GPU (block_table None:
    a contiguous cache), the rows to append, k_new / v_new (B, Snew, Hkv, D) as
    [B, Hkv, Snew, D] views, or None, and int32 cache_leftpad (B,) on the GPU (where each
    sequence's keys start in a contiguous cache) or None, and int32 cache_batch_idx (B,) on
    the GPU (the cache slot of each sequence in a contiguous cache) or None."""
    if (k_new is None) != (v_new is None):
        raise ValueError("autotune: k and v (the new keys and values) must be given together")
    lengths = index_fields(cache_seqlens, "cache_seqlens", "cache_seqlens")
    table = _ABSENT
    if block_table is not None:
        for what, t in (("cache_leftpad", cache_leftpad), ("cache_batch_idx", cache_batch_idx)):
            if t is not None:
                raise ValueError(f"autotune: {what} is not supported with a paged KV cache "
                                 "(block_table), as in flash-attn")
        table = table_fields(block_table, "block_table")
    new = _ABSENT * 2
    if k_new is not None:
        new = (*attention_fields(k_new, "k", False), *attention_fields(v_new, "v", False))
    leftpad = _ABSENT
    if cache_leftpad is not None:
        leftpad = index_fields(cache_leftpad, "cache_leftpad", "cache_leftpad")
    slots = _ABSENT
    if cache_batch_idx is not None:
        slots = index_fields(cache_batch_idx, "cache_batch_idx", "cache_batch_idx")
    return (*lengths, *table, *new, *leftpad, *slots)


def paged_fields(block_table):
    """The KV-cache fields of a variable-length call reading a paged cache (flash-attn's
    varlen block_table; each sequence's key count comes from cu_seqlens_k), or none."""
    if block_table is None:
        return NO_KVCACHE
    # no cache_seqlens; the table; none of the fields after it
    return (*_ABSENT, *table_fields(block_table, "block_table"), *NO_KVCACHE[2 * len(_ABSENT):])


def table_fields(t, what, dims="(batch_size, max_num_blocks_per_seq)"):
    """The autotune_tensor fields of an int32 2-d index tensor (block_table; seq_idx with
    dims "(batch, seqlen)") on the GPU, its last dimension contiguous."""
    try:
        dtype, shape, device = t.dtype, tuple(t.shape), t.device
    except AttributeError:
        raise TypeError(f"autotune: {what} must be a torch.Tensor of int32, not "
                        f"{type(t).__name__}") from None
    if str(dtype) != "torch.int32":
        raise TypeError(f"autotune: {what} has dtype {dtype}; expected torch.int32")
    if len(shape) != 2:
        raise ValueError(f"autotune: {what} must be 2-d {dims}, not {list(shape)}")
    if getattr(device, "type", "cuda") != "cuda":
        raise ValueError(f"autotune: {what} is on {device}; it must be a CUDA tensor (the kernel "
                         "reads it on the GPU)")
    strides = t.stride()
    if shape[1] > 1 and strides[1] != 1:
        raise ValueError(f"autotune: {what} must have a contiguous last dimension")
    ptr = t.data_ptr()
    if not ptr:
        _refuse_fields(t, what, 2)
    return (ptr, AUTOTUNE_INT32, 2, shape[0], shape[1], 0, 0, strides[0], 1, 0, 0)


def seq_idx_fields(t):
    """The autotune_tensor fields of causal-conv1d's seq_idx (int32 (batch, seqlen) on the
    GPU), or absent fields for None."""
    return _ABSENT if t is None else table_fields(t, "seq_idx", "(batch, seqlen)")


def attention_features(window=NO_WINDOW, softcap=0.0, alibi_slopes=None, varlen=NO_VARLEN,
                       kvcache=NO_KVCACHE):
    """The fields an attention call's struct ends with: whether it has a window, the
    window's bounds (keys before and after each query's diagonal, -1 unbounded), softcap
    (0: off) and the ALiBi slopes' tensor fields (fp32 [Hq] or [B, Hq], or None). The
    library checks the values (a bound below -1, a negative softcap, slopes of another
    shape or dtype), naming them."""
    try:
        left, right = (int(w) for w in window)
    except (TypeError, ValueError):
        raise ValueError(f"autotune: window_size must be a pair of ints (left, right), not "
                         f"{window!r}") from None
    for name, w in (("left", left), ("right", right)):
        if not -2**31 <= w < 2**31:
            raise ValueError(f"autotune: window_size's {name} bound {w} is out of range "
                             "(-1 for unbounded)")
    on = 0 if (left, right) == NO_WINDOW else 1
    return (on, left, right, float(softcap or 0.0), *tensor_fields(alibi_slopes, "alibi_slopes"),
            *varlen, *kvcache)


def _current_stream(t):
    """The raw CUstream of torch's current stream on t's device (None for CPU tensors:
    the library then refuses the tensor itself)."""
    if not t.is_cuda:
        return None
    import torch
    return torch._C._cuda_getCurrentRawStream(t.device.index)


class Library:
    """libautotune.so loaded, with its functions' argument types set and the three args
    layouts read from the library's own description. Shared by every Runtime of a
    process that loads the same file."""

    _loaded = {}
    _lock = threading.Lock()

    @classmethod
    def load(cls, path=None):
        path = path or _library.find()
        with cls._lock:
            lib = cls._loaded.get(path)
            if lib is None:
                lib = cls._loaded[path] = cls(path)
            return lib

    def __init__(self, path):
        self.path = path
        self.dll = lib = ctypes.CDLL(path)
        vp, u64 = ctypes.c_void_p, ctypes.c_uint64
        lib.autotune_runtime_create.argtypes = [ctypes.c_char_p, ctypes.c_int,
                                                ctypes.POINTER(vp)]
        lib.autotune_runtime_create_with_policy.argtypes = [
            ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(vp)]
        lib.autotune_runtime_create_on_device.argtypes = [
            ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(vp)]
        lib.autotune_runtime_destroy.argtypes = [vp]
        lib.autotune_runtime_destroy.restype = None
        lib.autotune_last_error.restype = ctypes.c_char_p
        lib.autotune_describe_args.argtypes = [ctypes.c_char_p, ctypes.c_char_p, u64]
        self.layouts = {}
        for op in OPS:
            text = ctypes.create_string_buffer(4096)
            self.check(lib.autotune_describe_args(op.encode(), text, len(text)))
            self.layouts[op] = ArgsLayout(text.value.decode())
            getattr(lib, f"autotune_{op}").argtypes = [vp, vp, vp]
            getattr(lib, f"autotune_{op}_variant").argtypes = [vp, vp, ctypes.c_char_p, u64]
        lib.autotune_attention_workspace_size.argtypes = [vp, vp, ctypes.POINTER(u64)]
        # The call functions once more, without argtypes, for the plans' warm path
        # (_calls.py): its arguments are ctypes objects already, so ctypes converts
        # nothing (a plain int would be passed as a C int: never pass one).
        self.calls = {op: lib._FuncPtr((f"autotune_{op}", lib)) for op in OPS}

    def check(self, status):
        if status != 0:
            raise AutotuneError(status, self.dll.autotune_last_error().decode())


class _ServedBy:
    """runtime_for of a Runtime's plans (_calls.py): calls its _runtime_for through a weak
    reference to it."""

    __slots__ = ("_runtime",)

    def __init__(self, runtime):
        self._runtime = weakref.ref(runtime)

    def __call__(self, index, t, what):
        return self._runtime()._runtime_for(index, t, what)


class Runtime:
    """One runtime of the C ABI: the tuning database (path, else $AUTOTUNE_DB, else the
    default path) opened read-only, on GPU `device` (an ordinal)."""

    def __init__(self, library=None, database=None, require_tuned=False, policy=None,
                 device=0):
        """library: path of libautotune.so (None: found as autotune._library says).
        policy, for shapes with no tuned winner: "nearest" (the default), "default",
        "error" (the same as require_tuned) or "pin:CONFIG"."""
        self.library = Library.load(library)
        self.lib = lib = self.library.dll
        self.layouts = self.library.layouts
        self._local = threading.local()
        # (device, stream) -> zero-filled buffer, kept for later calls on that stream (a
        # split-KV call leaves all of it zero, so calls of any shape that need no more share
        # it; one that needs more replaces it with one twice as large, or as large as it
        # asks); made and replaced under a lock (threads' first calls race otherwise: the
        # loser's buffer was freed while its call still held the pointer), replaced and
        # dropped ones kept a while longer (a call on another thread may hold the pointer,
        # not yet launched). The graphs' ((device, _GRAPHS)) in their own dict, the ones
        # they outgrew kept for good (a captured graph holds its pointer).
        self.workspaces = {}
        self.graph_workspaces = {}
        self._graphs_outgrown = []
        self._retired = collections.deque(maxlen=_MAX_WORKSPACES)
        self._workspace_lock = threading.Lock()
        self._workspace_need = {}  # a call's signature -> the workspace bytes it needs
        self.handle = ctypes.c_void_p()
        policy = policy or ("error" if require_tuned else "nearest")
        self.policy = policy
        self.database = database
        self.device = device
        self.check(lib.autotune_runtime_create_on_device(
            database.encode() if database else None, policy.encode(), int(device),
            ctypes.byref(self.handle)))
        from . import _calls
        self._calls = _calls
        self.plans = _calls.Plans()  # this runtime's per-signature call plans
        # What the plans' first calls ask for the runtime: one object made here (self.
        # _runtime_for would make a bound method on every call), holding self weakly (one
        # holding it strongly would be a cycle through self).
        self._served_by = _ServedBy(self)

    def check(self, status):
        if status != 0:
            raise AutotuneError(status, self.lib.autotune_last_error().decode())

    def __del__(self):
        if getattr(self, "handle", None):
            self.lib.autotune_runtime_destroy(self.handle)
            self.handle = None

    def pack(self, op, *values):
        """A new args struct of op (a ctypes buffer) holding values in the described
        field order."""
        layout = self.layouts[op]
        buf = ctypes.create_string_buffer(layout.size)
        layout.struct.pack_into(buf, 0, *values)
        return buf

    def _pack_call(self, op, *values):
        """The args struct of a call about to launch: this thread's buffer for op, reused
        by its next call (a warm call allocates nothing here)."""
        buffers = getattr(self._local, "buffers", None)
        if buffers is None:
            buffers = self._local.buffers = {name: ctypes.create_string_buffer(layout.size)
                                             for name, layout in self.layouts.items()}
        buf = buffers[op]
        self.layouts[op].struct.pack_into(buf, 0, *values)
        return buf

    stream = staticmethod(_current_stream)

    def _runtime_for(self, index, t, what):
        """The runtime of the plans' first calls: this one (the library checks that every
        pointer is memory of this runtime's GPU)."""
        if index is None or index < 0:
            raise ValueError(f"autotune: {what} is on {t.device}; autotune's kernels take "
                             "CUDA tensors")
        return self

    def attention_workspace(self, key, fields, q, features=None):
        """(pointer, bytes) of the workspace an attention call on the current stream needs
        ((0, 0) unless its variant splits the keys). The bytes are asked once per call
        signature (key; None: asked every call, and refused inside CUDA graph capture);
        the buffer is the stream's (stream_workspace)."""
        need = self._workspace_need.get(key) if key is not None else None
        if need is None:
            import torch
            if q.is_cuda and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    "autotune: the first attention call of this signature (shapes, strides, "
                    "dtype, flags) is inside CUDA graph capture; run it once eagerly before "
                    "capturing (torch.cuda.graphs' warm-up): the first call resolves the "
                    "variant and may compile it, which may not happen in a graph")
            n = ctypes.c_uint64()
            self.check(self.lib.autotune_attention_workspace_size(
                self.handle, self.pack("attention", *fields, 0, 0,
                                       *(features or attention_features())), ctypes.byref(n)))
            need = n.value
            if need:
                # The graphs' buffer of this size, zero-filled now (it cannot be in capture).
                self._workspace(q.get_device(), _GRAPHS, need)
            if key is not None:
                if len(self._workspace_need) >= 4096:  # shapes that change every call
                    self._workspace_need.clear()
                self._workspace_need[key] = need
        if not need:
            return (0, 0)
        return (self.stream_workspace(q.get_device(), need), need)

    def stream_workspace(self, device, need):
        """The pointer of the current stream's zero-filled workspace of at least need
        bytes. A split-KV call counts its blocks in it and leaves all of it zero: calls on
        one stream run one after another and share it, whatever their shapes; calls on
        different streams may overlap, so each stream has its own. Calls captured in CUDA
        graphs share one, made or grown when a size was first asked (eagerly): replays of
        graphs that both hold split-KV calls must not overlap (on one stream they do not)."""
        import torch
        if torch._C._cuda_isCurrentStreamCapturing():
            return self._workspace(device, _GRAPHS, need)
        return self._workspace(device, torch._C._cuda_getCurrentRawStream(device), need)

    def _workspace(self, device, stream, need):
        # Entries are (pointer, bytes, tensor): a warm call reads two ints, no tensor.
        wkey = (device, stream)
        graphs = stream == _GRAPHS
        kept = self.graph_workspaces if graphs else self.workspaces
        entry = kept.get(wkey)
        if entry is not None and entry[1] >= need:
            return entry[0]
        import torch
        with self._workspace_lock:
            entry = kept.get(wkey)  # another thread's, made meanwhile
            if entry is None or entry[1] < need:
                if entry is not None:
                    # Outgrown: into the retired queue (the graphs': kept for good). A call
                    # that read its pointer may not have launched yet; once freed, torch's
                    # allocator hands its memory out again only in its stream's order,
                    # after the calls that used it.
                    (self._graphs_outgrown if graphs else self._retired).append(entry[2])
                    need = max(need, 2 * entry[1])
                elif not graphs and len(kept) >= _MAX_WORKSPACES:
                    self._retired.append(kept.pop(next(iter(kept)))[2])  # the oldest stream's
                buf = torch.zeros(need, device=torch.device("cuda", device), dtype=torch.uint8)
                entry = kept[wkey] = (buf.data_ptr(), need, buf)
        return entry[0]

    def variant(self, op, args):
        """'SOURCE VARIANT' of what a call of op with args runs (SOURCE: tuned,
        nearest PROBLEM, default, pinned)."""
        buf = ctypes.create_string_buffer(512)
        self.check(getattr(self.lib, f"autotune_{op}_variant")(self.handle, args, buf, len(buf)))
        return buf.value.decode()

    # ---- causal_conv1d ----------------------------------------------------------------
    def causal_conv1d_args(self, x, weight, bias=None, out=None, silu=True,
                           initial_states=None, final_states=None, _pack=None, seq_idx=None):
        """The C struct for a call: x/out [B, C, L] (contiguous last dimension, or both
        channel-last: stride(1) == 1), weight [C, W], bias [C], states [B, C, W-1],
        seq_idx int32 [B, L] (packed sequences, channel-last x)."""
        return (_pack or self.pack)(
            "causal_conv1d", *tensor_fields(x, "x"), *tensor_fields(weight, "weight"),
            *tensor_fields(bias, "bias"), *tensor_fields(initial_states, "initial_states"),
            *tensor_fields(out, "out"), *tensor_fields(final_states, "final_states"), int(silu),
            *seq_idx_fields(seq_idx))

    def causal_conv1d(self, x, weight, bias=None, silu=True, initial_states=None,
                      final_states=None, out=None, seq_idx=None):
        if out is None and final_states is None:
            return self._calls.conv(self.plans, self._served_by, x, weight, bias,
                                    initial_states, silu, False, seq_idx=seq_idx)
        if out is None:
            self._calls._load_torch()
            out = self._calls.conv_out(x, self._calls.conv_out_form(x))
        args = self.causal_conv1d_args(x, weight, bias, out, silu, initial_states, final_states,
                                       self._pack_call, seq_idx)
        self.check(self.lib.autotune_causal_conv1d(self.handle, args, self.stream(x)))
        return out

    def causal_conv1d_variant(self, args):
        return self.variant("causal_conv1d", args)

    # ---- causal_conv1d_update ---------------------------------------------------------
    def causal_conv1d_update_args(self, x, conv_state, weight, bias=None, out=None, silu=True,
                                  cache_seqlens=None, conv_state_indices=None, _pack=None):
        """The C struct for a call: x/out [B, C, L] and conv_state [B (or E), C, S] with any
        strides, weight [C, W], bias [C], cache_seqlens and conv_state_indices int32 [B]."""
        return (_pack or self.pack)(
            "causal_conv1d_update", *tensor_fields(x, "x"),
            *tensor_fields(conv_state, "conv_state"), *tensor_fields(weight, "weight"),
            *tensor_fields(bias, "bias"), *tensor_fields(out, "out"),
            *sequence_index_fields(cache_seqlens, "cache_seqlens"),
            *sequence_index_fields(conv_state_indices, "conv_state_indices"), int(silu))

    def causal_conv1d_update(self, x, conv_state, weight, bias=None, silu=True,
                             cache_seqlens=None, conv_state_indices=None):
        """out [B, C, L] of a decoding step of the conv; conv_state [B, C, S] (or [E, C, S]
        with conv_state_indices, whose entries outside [0, E) are padding: out 0, no row
        written), S >= W - 1, is updated in place: shifted left by L, or with
        cache_seqlens a circular buffer written from cache_seqlens[b] (mod S) on. One
        launch."""
        return self._calls.conv_update(self.plans, self._served_by, x, conv_state, weight, bias,
                                       silu, cache_seqlens, conv_state_indices)

    def causal_conv1d_update_variant(self, args):
        return self.variant("causal_conv1d_update", args)

    # ---- selective_state_update -------------------------------------------------------
    def selective_state_update(self, state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                               dt_softplus=False, state_batch_indices=None):
        """out (x's shape) of one decoding step of the selective scan, mamba-ssm's
        selective_state_update; state ([B, H, P, N] or [B, P, N], or E rows selected by
        int32 state_batch_indices [B], whose entries outside [0, E) are padding: out 0,
        no row written) is updated in place. One launch."""
        return self._calls.state_update(self.plans, self._served_by, state, x, dt, A, B, C, D, z,
                                        dt_bias, dt_softplus, state_batch_indices)

    def selective_state_update_variant(self, args):
        return self.variant("selective_state_update", args)

    # ---- attention ----------------------------------------------------------------------
    def attention_args(self, q, k, v, o, lse=None, causal=False, scale=None, layout="bshd",
                       workspace=None, workspace_bytes=0, _pack=None, window=NO_WINDOW,
                       softcap=0.0, alibi_slopes=None):
        """The C struct for a call. q, o: [B, Sq, Hq, D] (layout "bshd") or [B, Hq, Sq, D]
        ("bhsd"); k, v likewise with Hkv; any strides with a contiguous last dimension.
        lse: fp32 [B, Hq, Sq] contiguous or None. window, softcap, alibi_slopes: as
        attention() takes them."""
        if layout not in ("bshd", "bhsd"):
            raise ValueError(f"autotune: layout must be 'bshd' or 'bhsd', not {layout!r}")
        bhsd = layout == "bhsd"
        return (_pack or self.pack)(
            "attention", *attention_fields(q, "q", bhsd), *attention_fields(k, "k", bhsd),
            *attention_fields(v, "v", bhsd), *attention_fields(o, "o", bhsd),
            *tensor_fields(lse, "lse"), int(causal), scale_field(scale), workspace or 0,
            workspace_bytes, *attention_features(window, softcap, alibi_slopes))

    def attention(self, q, k, v, causal=False, scale=None, layout="bshd", return_lse=False,
                  out=None, window=NO_WINDOW, softcap=0.0, alibi_slopes=None):
        """softmax(scale Q K^T + mask) V (scale None: 1/sqrt(D)); with return_lse, also the
        fp32 log-sum-exp [B, Hq, Sq]. A split-KV variant's workspace is allocated,
        zero-filled and kept by this object. window: (left, right) keys around each
        query's (bottom-right aligned) diagonal, -1 unbounded, (-1, -1) none; softcap > 0:
        logits s become softcap * tanh(s / softcap); alibi_slopes: fp32 [Hq] or [B, Hq]
        (bias -slope * |i + Sk - Sq - j|)."""
        if layout not in ("bshd", "bhsd"):
            raise ValueError(f"autotune: layout must be 'bshd' or 'bhsd', not {layout!r}")
        if type(window) is not tuple:
            window = tuple(window)
        if out is None and layout == "bshd":
            return self._calls.attention(self.plans, self._served_by, q, k, v, causal, scale,
                                         return_lse, None, window, softcap, alibi_slopes)
        import torch
        if out is None:
            out = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = None
        if return_lse:
            B, Hq, Sq = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bhsd" else \
                (q.shape[0], q.shape[2], q.shape[1])
            lse = torch.empty((B, Hq, Sq), device=q.device, dtype=torch.float32)
        bhsd = layout == "bhsd"
        fields = (*attention_fields(q, "q", bhsd), *attention_fields(k, "k", bhsd),
                  *attention_fields(v, "v", bhsd), *attention_fields(out, "o", bhsd),
                  *tensor_fields(lse, "lse"), int(causal), scale_field(scale))
        features = attention_features(window, softcap, alibi_slopes)
        # The workspace a split-KV variant needs, asked once per signature.
        key = ("runtime", layout, q.get_device(), q.shape, q.stride(), q.dtype, k.shape,
               k.stride(), k.dtype, v.shape, v.stride(), v.dtype, out.shape, out.stride(),
               out.dtype, bool(causal), scale, return_lse, window, softcap,
               None if alibi_slopes is None else (alibi_slopes.shape, alibi_slopes.dtype))
        ws = self.attention_workspace(key, fields, q, features)
        args = self.attention_args(q, k, v, out, lse, causal, scale, layout, *ws, self._pack_call,
                                   window, softcap, alibi_slopes)
        self.check(self.lib.autotune_attention(self.handle, args, self.stream(q)))
        return (out, lse) if return_lse else out

    def attention_varlen(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         causal=False, scale=None, return_lse=False, out=None, window=NO_WINDOW,
                         softcap=0.0, alibi_slopes=None, block_table=None):
        """Variable-length batches (flash-attn's varlen): q, out (total_q, nheads, headdim),
        k, v (total_k, nheads_k, headdim), packed sequences; cu_seqlens_q/k int32
        (batch_size + 1,) CUDA offsets; max_seqlen_q/k the longest sequences (ints). With
        block_table int32 (batch_size, max_num_blocks_per_seq), k and v are a paged KV cache
        (num_blocks, page_block_size, nheads_k, headdim) and sequence b's keys are the first
        cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys of its pages (block_table[b]), as in
        flash-attn. With return_lse also the fp32 log-sum-exp (nheads, total_q). The offsets
        are read on the GPU, not checked: they must start at 0, not decrease and stay within
        the tensors (and the pages), and no sequence may be longer than its max_seqlen. A
        sequence is clamped into the tensors: a wrong offset never reads or writes past
        them."""
        if out is None:
            return self._calls.varlen(self.plans, self._served_by, q, k, v, cu_seqlens_q,
                                      cu_seqlens_k, max_seqlen_q, max_seqlen_k, bool(causal),
                                      scale, bool(return_lse), tuple(window), softcap,
                                      alibi_slopes, block_table)
        check_varlen_tensors(q, k, v, block_table is not None)
        varlen = varlen_fields(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        import torch
        lse = None
        if return_lse:
            lse = torch.empty((q.shape[1], q.shape[0]), device=q.device, dtype=torch.float32)
        kv_fields = tensor_fields if block_table is None else attention_fields
        fields = (*tensor_fields(q, "q"), *kv_fields(k, "k"), *kv_fields(v, "v"),
                  *tensor_fields(out, "o"), *tensor_fields(lse, "lse"), int(causal),
                  scale_field(scale))
        features = attention_features(tuple(window), softcap, alibi_slopes, varlen,
                                      paged_fields(block_table))
        # What the variant (and so the workspace) depends on; not the offsets' values.
        key = ("varlen", q.get_device(), q.shape, q.stride(), q.dtype, k.shape, k.stride(),
               k.dtype, v.shape, v.stride(), v.dtype, tuple(cu_seqlens_q.shape),
               int(max_seqlen_q), int(max_seqlen_k), bool(causal), scale, return_lse,
               tuple(window), softcap, _slopes_key(alibi_slopes),
               None if block_table is None else tuple(block_table.shape))
        ws = self.attention_workspace(key, fields, q, features)
        args = self._pack_call("attention", *fields, *ws, *features)
        self.check(self.lib.autotune_attention(self.handle, args, self.stream(q)))
        return (out, lse) if return_lse else out

    def attention_kvcache(self, q, k_cache, v_cache, cache_seqlens, block_table=None, k_new=None,
                          v_new=None, causal=False, scale=None, return_lse=False,
                          window=NO_WINDOW, softcap=0.0, alibi_slopes=None, cache_leftpad=None,
                          cache_batch_idx=None):
        """Decoding against a KV cache (flash-attn's flash_attn_with_kvcache): q
        (B, Sq, Hq, D); k_cache, v_cache (B, Scache, Hkv, D) or paged (num_blocks, page,
        Hkv, D) with block_table int32 (B, blocks_per_seq); cache_seqlens int32 (B,) on the
        GPU; k_new, v_new (B, Snew, Hkv, D) appended into the cache and attended;
        cache_leftpad int32 (B,) on the GPU (a contiguous cache only): sequence b's keys
        start at cache row cache_leftpad[b]; cache_batch_idx int32 (B,) on the GPU (a
        contiguous cache only): k_cache and v_cache are then (B_cache, Scache, Hkv, D), a pool
        of slots, and sequence b reads and appends to slot cache_batch_idx[b] (clamped into
        the pool). With return_lse also the fp32 log-sum-exp (B, Hq, Sq)."""
        return self._calls.kvcache(self.plans, self._served_by, q, k_cache, v_cache,
                                   cache_seqlens, block_table, k_new, v_new, bool(causal), scale,
                                   bool(return_lse), tuple(window), softcap, alibi_slopes,
                                   cache_leftpad, cache_batch_idx)

    # ---- selective_scan -----------------------------------------------------------------
    def selective_scan_args(self, u, delta, A, B, C, out, D=None, z=None, delta_bias=None,
                            delta_softplus=True, last_state=None, _pack=None):
        """The C struct for a call. u, delta, z, out: [B, D, L] (contiguous last dim); A fp32
        [D, N]; B, C: [B, N, L] or [B, G, N, L] of u's dtype (variable) or fp32 [D, N]
        (fixed)."""
        return (_pack or self.pack)(
            "selective_scan", *tensor_fields(u, "u"), *tensor_fields(delta, "delta"),
            *tensor_fields(A, "A"), *tensor_fields(B, "B"), *tensor_fields(C, "C"),
            *tensor_fields(D, "D"), *tensor_fields(z, "z"),
            *tensor_fields(delta_bias, "delta_bias"), *tensor_fields(out, "out"),
            *tensor_fields(last_state, "last_state"), int(delta_softplus))

    def selective_scan(self, u, delta, A, B, C, D=None, z=None, delta_bias=None,
                       delta_softplus=True, return_last_state=False, out=None):
        """Mamba-1 selective scan forward; with return_last_state also h_L fp32 [B, D, N]."""
        if out is None:
            return self._calls.scan(self.plans, self._served_by, u, delta, A, B, C, D, z,
                                    delta_bias, delta_softplus, return_last_state)
        import torch
        last = None
        if return_last_state:
            last = torch.empty((u.shape[0], u.shape[1], A.shape[1]), device=u.device,
                               dtype=torch.float32)
        args = self.selective_scan_args(u, delta, A, B, C, out, D, z, delta_bias,
                                        delta_softplus, last, self._pack_call)
        self.check(self.lib.autotune_selective_scan(self.handle, args, self.stream(u)))
        return (out, last) if return_last_state else out
