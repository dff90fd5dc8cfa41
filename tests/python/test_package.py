"""CPU tests of the autotune Python package (python/autotune), run in CI without torch
and without a GPU (ctest python_package):

    AUTOTUNE_LIBRARY=build/libautotune.so python3 -m unittest discover -s tests/python \
        -p "test_package*.py" -v

What needs torch is skipped with a message when torch does not import; what needs a
GPU lives in test_gpu.py / run_gpu.py.
"""
import ast
import collections
import contextlib
import ctypes
import gc
import os
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
PACKAGE = os.path.join(REPO, "python")
sys.path.insert(0, PACKAGE)
sys.path.insert(0, HERE)

import autotune  # noqa: E402
from autotune import _calls, _config, _library, _runtime  # noqa: E402
import harness  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
NO_TORCH = "torch does not import here: the torch parts are skipped (CI has no torch)"


def library_path():
    """The library to test against: $AUTOTUNE_LIBRARY (ctest sets it), else build/."""
    path = os.environ.get("AUTOTUNE_LIBRARY") or os.path.join(REPO, "build", "libautotune.so")
    return path if os.path.exists(path) else None


@contextlib.contextmanager
def env(**values):
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class TestLibrarySearch(unittest.TestCase):
    def test_a_missing_library_is_an_error_at_first_use_naming_where_it_looked(self):
        with env(AUTOTUNE_LIBRARY="/nonexistent/dir/libautotune.so"):
            with self.assertRaises(_library.LibraryNotFoundError) as cm:
                _library.find()
            self.assertIn("/nonexistent/dir/libautotune.so", str(cm.exception))
            self.assertIn("$AUTOTUNE_LIBRARY", str(cm.exception))
            with self.assertRaises(_library.LibraryNotFoundError):
                autotune.Runtime()

    def test_importing_the_package_never_needs_the_library(self):
        r = subprocess.run([sys.executable, "-c", "import autotune, autotune._runtime"],
                           env=dict(os.environ, AUTOTUNE_LIBRARY="/nonexistent/libautotune.so",
                                    PYTHONPATH=PACKAGE), capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_search_order_is_env_then_package_then_repository_then_loader(self):
        with env(AUTOTUNE_LIBRARY=None):
            where = [w for w, _ in _library.candidates()]
            paths = [p for _, p in _library.candidates()]
        self.assertEqual(where[0], "beside the package")
        self.assertTrue(paths[0].startswith(os.path.join(PACKAGE, "autotune")))
        self.assertIn(os.path.join(REPO, "build", "libautotune.so"), paths)
        self.assertEqual(where[-1], "the dynamic loader's search path")
        self.assertLess(where.index("beside the package"), where.index("the repository's build/"))
        with env(AUTOTUNE_LIBRARY="/x/libautotune.so"):
            self.assertEqual(_library.candidates(), [("$AUTOTUNE_LIBRARY", "/x/libautotune.so")])

    def test_the_built_library_is_found_and_loads(self):
        path = library_path()
        if not path:
            self.skipTest("no built libautotune.so (set AUTOTUNE_LIBRARY)")
        with env(AUTOTUNE_LIBRARY=path):
            self.assertEqual(_library.find(), path)


class TestArgsLayouts(unittest.TestCase):
    def setUp(self):
        path = library_path()
        if not path:
            self.skipTest("no built libautotune.so (set AUTOTUNE_LIBRARY)")
        self.lib = _runtime.Library.load(path)

    def test_every_op_is_described_with_its_tensors_in_header_order(self):
        expected = {
            "causal_conv1d": ["x", "weight", "bias", "initial_states", "out", "final_states",
                              "silu", "seq_idx"],
            "attention": ["q", "k", "v", "o", "lse", "causal", "scale", "workspace",
                          "workspace_bytes", "window", "window_left", "window_right", "softcap",
                          "alibi_slopes", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                          "max_seqlen_k", "cache_seqlens", "block_table", "k_new", "v_new",
                          "cache_leftpad", "cache_batch_idx"],
            "selective_scan": ["u", "delta", "A", "B", "C", "D", "z", "delta_bias", "out",
                               "last_state", "delta_softplus"],
        }
        for op, names in expected.items():
            layout = self.lib.layouts[op]
            self.assertEqual([f[0] for f in layout.fields], names, op)
            self.assertLessEqual(layout.struct.size, layout.size)
            self.assertTrue(layout.rules, op)

    def test_every_attention_call_form_packs_into_the_described_struct(self):
        # The tuples the call paths build (plain, varlen, varlen over a paged cache, a KV
        # cache with its index tensors) fill the library's struct exactly: a field the
        # header gains and a builder misses fails here, before any GPU.
        i32 = FakeInt32()
        lens = FakeTensor((3,), ptr=0x5000, dtype=i32)
        cu = FakeTensor((4,), ptr=0x5100, dtype=i32)
        table = FakeTensor((3, 4), ptr=0x6000, dtype=i32)
        head = _runtime._ABSENT * 5 + (1, 0.0, 0, 0)  # q k v o lse, causal, scale, workspace
        varlen = _runtime.varlen_fields(cu, cu, 100, 200)
        forms = {
            "plain": _runtime.attention_features(),
            "varlen": _runtime.attention_features(varlen=varlen),
            "varlen paged": _runtime.attention_features(
                varlen=varlen, kvcache=_runtime.paged_fields(table)),
            "kvcache": _runtime.attention_features(
                kvcache=_runtime.kvcache_fields(lens, None, None, None, lens, lens)),
            "kvcache paged": _runtime.attention_features(
                kvcache=_runtime.kvcache_fields(lens, table)),
        }
        layout = self.lib.layouts["attention"]
        for name, features in forms.items():
            with self.subTest(name):
                layout.struct.pack(*head, *features)  # struct.error on a wrong count

    def test_a_runtime_without_a_driver_is_a_status_not_a_crash(self):
        try:
            rt = _runtime.Runtime(library_path(), "/nonexistent/autotune-test.db")
        except _runtime.AutotuneError as e:
            self.assertIn(e.status, (2, 3), str(e))  # no device / CUDA
        else:
            self.assertTrue(rt.handle)  # a machine with a GPU

    def test_an_unknown_policy_is_refused_by_name(self):
        with self.assertRaises(_runtime.AutotuneError) as cm:
            _runtime.Runtime(library_path(), None, policy="heuristicz")
        self.assertIn("heuristicz", str(cm.exception))


class FakeDtype:
    is_complex = False

    def __repr__(self):
        return "fake.bfloat16"


class FakeComplex:
    is_complex = True

    def __repr__(self):
        return "fake.complex64"


class FakeInt32:
    """What index_fields reads of an int32 dtype: its name."""

    def __str__(self):
        return "torch.int32"


class FakeTensor:
    """What tensor_fields reads of a tensor: shape, stride(), data_ptr(), dtype."""

    def __init__(self, shape, strides=None, ptr=0x7000, dtype=None):
        self.shape = tuple(shape)
        if strides is None:
            strides, step = [], 1
            for n in reversed(shape):
                strides.insert(0, step)
                step *= n
        self._strides = tuple(strides)
        self._ptr = ptr
        self.dtype = dtype
        self.device = "fake"

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._ptr


class TestTensorFields(unittest.TestCase):
    def setUp(self):
        self.dtype = FakeDtype()
        _runtime._CODES[self.dtype] = _runtime.AUTOTUNE_BF16

    def tearDown(self):
        _runtime._CODES.pop(self.dtype, None)

    def test_a_tensor_packs_as_pointer_dtype_ndim_shape_strides(self):
        t = FakeTensor((2, 3, 5), dtype=self.dtype)
        self.assertEqual(_runtime.tensor_fields(t, "x"),
                         (0x7000, 2, 3, 2, 3, 5, 0, 15, 5, 1, 0))
        self.assertEqual(_runtime.tensor_fields(None, "bias"), _runtime._ABSENT)

    def test_bshd_attention_tensors_pass_with_dims_1_and_2_swapped_and_no_view(self):
        q = FakeTensor((2, 7, 4, 64), dtype=self.dtype)  # [B, S, H, D] contiguous
        self.assertEqual(_runtime.attention_fields(q, "q"),
                         (0x7000, 2, 4, 2, 4, 7, 64, 7 * 4 * 64, 64, 4 * 64, 1))

    def test_a_null_pointer_is_refused_not_read_as_an_absent_tensor(self):
        with self.assertRaisesRegex(ValueError, "bias has no data"):
            _runtime.tensor_fields(FakeTensor((4,), ptr=0, dtype=self.dtype), "bias")
        with self.assertRaisesRegex(ValueError, "q has no data"):
            _runtime.attention_fields(FakeTensor((1, 2, 3, 8), ptr=0, dtype=self.dtype), "q")

    def test_five_dimensions_a_scalar_and_a_non_tensor_are_refused_by_name(self):
        with self.assertRaisesRegex(ValueError, "B has 5 dimensions"):
            _runtime.tensor_fields(FakeTensor((1, 1, 1, 1, 1), dtype=self.dtype), "B")
        with self.assertRaisesRegex(ValueError, "D has 0 dimensions"):
            _runtime.tensor_fields(FakeTensor((), dtype=self.dtype), "D")
        with self.assertRaisesRegex(TypeError, "D must be a torch.Tensor, not float"):
            _runtime.tensor_fields(1.0, "D")

    def test_a_complex_tensor_is_a_type_error_naming_it(self):
        with self.assertRaisesRegex(TypeError, "A is complex"):
            _runtime.tensor_fields(FakeTensor((4, 8), dtype=FakeComplex()), "A")
        if torch is not None:
            with self.assertRaisesRegex(TypeError, "A is complex"):
                _runtime.tensor_fields(torch.zeros(4, 8, dtype=torch.complex64), "A")

    def test_fields_fill_the_described_struct(self):
        path = library_path()
        if not path:
            self.skipTest("no built libautotune.so")
        layout = _runtime.Library.load(path).layouts["causal_conv1d"]
        t = FakeTensor((2, 64, 128), dtype=self.dtype)
        w = FakeTensor((64, 4), dtype=self.dtype)
        values = (*_runtime.tensor_fields(t, "x"), *_runtime.tensor_fields(w, "weight"),
                  *_runtime._ABSENT, *_runtime._ABSENT, *_runtime.tensor_fields(t, "out"),
                  *_runtime._ABSENT, 1, *_runtime._ABSENT)
        buf = bytearray(layout.size)
        layout.struct.pack_into(buf, 0, *values)
        self.assertEqual(int.from_bytes(buf[0:8], sys.byteorder), 0x7000)


class TestAttentionFeatures(unittest.TestCase):
    """flash-attn's window_size, softcap and alibi_slopes as the struct's last fields."""

    def setUp(self):
        self.bf16, self.f32 = FakeDtype(), FakeDtype()
        _runtime._CODES[self.bf16] = _runtime.AUTOTUNE_BF16
        _runtime._CODES[self.f32] = _runtime.AUTOTUNE_FP32

    def tearDown(self):
        _runtime._CODES.pop(self.bf16, None)
        _runtime._CODES.pop(self.f32, None)

    def test_no_window_is_off_and_a_window_packs_its_bounds(self):
        self.assertEqual(_runtime.attention_features()[:4], (0, -1, -1, 0.0))
        self.assertEqual(_runtime.attention_features((128, 0), 30.0)[:4], (1, 128, 0, 30.0))
        self.assertEqual(_runtime.attention_features((-1, 5))[:4], (1, -1, 5, 0.0))
        # The library names a bound below -1 (window_left must be -1 ...); packing keeps it.
        self.assertEqual(_runtime.attention_features((-2, 5))[:3], (1, -2, 5))

    def test_a_window_that_is_not_a_pair_of_ints_is_refused_by_name(self):
        for bad in ((1,), (1, 2, 3), ("a", 1), None, (2**40, 0)):
            with self.assertRaisesRegex(ValueError, "window_size"):
                _runtime.attention_features(bad)

    def test_slopes_pack_as_a_tensor_after_the_scalars(self):
        slopes = FakeTensor((8,), dtype=self.f32)
        fields = _runtime.attention_features((-1, -1), 0.0, slopes)
        n = len(_runtime._ABSENT)
        self.assertEqual(fields[4:4 + n], _runtime.tensor_fields(slopes, "alibi_slopes"))
        self.assertEqual(_runtime.attention_features()[4:4 + n], _runtime._ABSENT)
        # then the varlen fields: absent offsets and max_seqlen 0
        self.assertEqual(_runtime.attention_features()[4 + n:4 + n + len(_runtime.NO_VARLEN)],
                         _runtime.NO_VARLEN)
        self.assertEqual(_runtime.attention_features()[4 + n + len(_runtime.NO_VARLEN):],
                         _runtime.NO_KVCACHE)

    def test_varlen_fields_take_int32_offsets_and_positive_lengths(self):
        i32 = FakeInt32()
        cu = FakeTensor((5,), ptr=0xA000, dtype=i32)
        fields = _runtime.varlen_fields(cu, cu, 300, 400)
        self.assertEqual(fields[:4], (0xA000, _runtime.AUTOTUNE_INT32, 1, 5))
        self.assertEqual(fields[-2:], (300, 400))
        with self.assertRaisesRegex(TypeError, "cu_seqlens_q has dtype .*int32"):
            _runtime.varlen_fields(FakeTensor((5,), dtype=self.f32), cu, 300, 400)
        with self.assertRaisesRegex(ValueError, "cu_seqlens_k must be 1-d"):
            _runtime.varlen_fields(cu, FakeTensor((2, 5), dtype=i32), 300, 400)
        with self.assertRaisesRegex(ValueError, "max_seqlen_k=0"):
            _runtime.varlen_fields(cu, cu, 300, 0)
        with self.assertRaisesRegex(TypeError, "max_seqlen_q must be an int"):
            _runtime.varlen_fields(cu, cu, 3.5, 4)
        with self.assertRaisesRegex(TypeError, "cu_seqlens_q must be a torch.Tensor"):
            _runtime.varlen_fields([0, 3], cu, 3, 4)

    def test_kvcache_fields(self):
        i32 = FakeInt32()
        lens = FakeTensor((3,), ptr=0x5000, dtype=i32)
        table = FakeTensor((3, 4), ptr=0x6000, dtype=i32)
        fields = _runtime.kvcache_fields(lens, table)
        n = len(_runtime._ABSENT)
        self.assertEqual(len(fields), 6 * n)
        self.assertEqual(len(_runtime.NO_KVCACHE), 6 * n)
        self.assertEqual(fields[0], 0x5000)
        self.assertEqual(fields[n:n + 5], (0x6000, _runtime.AUTOTUNE_INT32, 2, 3, 4))
        self.assertEqual(fields[2 * n:], _runtime._ABSENT * 4)
        # cache_leftpad and cache_batch_idx: the last tensors, int32 (B,) with a contiguous
        # cache only.
        leftpad = FakeTensor((3,), ptr=0x7000, dtype=i32)
        fields = _runtime.kvcache_fields(lens, None, None, None, leftpad)
        self.assertEqual(len(fields), 6 * n)
        self.assertEqual(fields[n:4 * n], _runtime._ABSENT * 3)
        self.assertEqual(fields[4 * n:4 * n + 4], (0x7000, _runtime.AUTOTUNE_INT32, 1, 3))
        self.assertEqual(fields[5 * n:], _runtime._ABSENT)
        slots = FakeTensor((3,), ptr=0x8000, dtype=i32)
        fields = _runtime.kvcache_fields(lens, None, None, None, None, slots)
        self.assertEqual(fields[4 * n:5 * n], _runtime._ABSENT)
        self.assertEqual(fields[5 * n:5 * n + 4], (0x8000, _runtime.AUTOTUNE_INT32, 1, 3))
        with self.assertRaisesRegex(ValueError, "cache_batch_idx is not supported with a paged"):
            _runtime.kvcache_fields(lens, table, None, None, None, slots)
        # A varlen call's paged cache: the table alone, in as many fields as a KV-cache call.
        fields = _runtime.paged_fields(table)
        self.assertEqual(len(fields), len(_runtime.NO_KVCACHE))
        self.assertEqual(fields[:n], _runtime._ABSENT)
        self.assertEqual(fields[n:n + 5], (0x6000, _runtime.AUTOTUNE_INT32, 2, 3, 4))
        self.assertEqual(fields[2 * n:], _runtime._ABSENT * 4)
        self.assertEqual(_runtime.paged_fields(None), _runtime.NO_KVCACHE)
        with self.assertRaisesRegex(TypeError, "cache_batch_idx has dtype .*int32"):
            _runtime.kvcache_fields(lens, None, None, None, None, FakeTensor((3,), dtype=self.f32))
        with self.assertRaisesRegex(ValueError, "cache_leftpad is not supported with a paged"):
            _runtime.kvcache_fields(lens, table, None, None, leftpad)
        with self.assertRaisesRegex(TypeError, "cache_leftpad has dtype .*int32"):
            _runtime.kvcache_fields(lens, None, None, None, FakeTensor((3,), dtype=self.f32))
        with self.assertRaisesRegex(ValueError, r"cache_leftpad must be 1-d \(batch_size,\)"):
            _runtime.kvcache_fields(lens, None, None, None, FakeTensor((3, 1), dtype=i32))
        with self.assertRaisesRegex(TypeError, "block_table has dtype"):
            _runtime.kvcache_fields(lens, FakeTensor((3, 4), dtype=self.f32))
        with self.assertRaisesRegex(ValueError, "block_table must be 2-d"):
            _runtime.kvcache_fields(lens, FakeTensor((12,), dtype=i32))
        with self.assertRaisesRegex(ValueError, "k and v .* together"):
            _runtime.kvcache_fields(lens, table, FakeTensor((3, 1, 2, 64), dtype=self.bf16))

    def test_the_features_fill_the_described_struct(self):
        path = library_path()
        if not path:
            self.skipTest("no built libautotune.so")
        layout = _runtime.Library.load(path).layouts["attention"]
        q = FakeTensor((1, 2, 64, 80), dtype=self.bf16)
        slopes = FakeTensor((2,), ptr=0x9000, dtype=self.f32)
        values = (*(_runtime.tensor_fields(q, "q") * 4), *_runtime._ABSENT, 1, 0.0, 0, 0,
                  *_runtime.attention_features((16, -1), 5.0, slopes))
        buf = bytearray(layout.size)
        layout.struct.pack_into(buf, 0, *values)
        at = layout.offsets
        self.assertEqual(int.from_bytes(buf[at["window"]:at["window"] + 4], sys.byteorder), 1)
        self.assertEqual(int.from_bytes(buf[at["window_left"]:at["window_left"] + 4],
                                        sys.byteorder), 16)
        self.assertEqual(int.from_bytes(buf[at["alibi_slopes"]:at["alibi_slopes"] + 8],
                                        sys.byteorder), 0x9000)
        self.assertIn(at["alibi_slopes"] // 8, layout.pointer_slots)

    def test_warm_calls_rewrite_the_pointers_of_named_tensor_fields(self):
        # A warm call writes each data pointer into the word of the field it names; the
        # structs gained tensor fields (varlen, KV cache) after the ones a plan rewrites.
        path = library_path()
        if not path:
            self.skipTest("no built libautotune.so")
        layouts = _runtime.Library.load(path).layouts
        for op, names in (*_calls.POINTERS.items(), ("attention", _calls.KVCACHE_POINTERS),
                          ("attention", _calls.VARLEN_POINTERS)):
            layout = layouts[op]
            slots = layout.pointer_slots_of(names)
            self.assertEqual(slots, tuple(layout.offsets[n] // 8 for n in names))
            self.assertTrue(set(slots) <= set(layout.pointer_slots), op)
        self.assertGreater(len(layouts["attention"].pointer_slots),
                           len(_calls.POINTERS["attention"]))
        with self.assertRaises(ValueError):
            layouts["attention"].pointer_slots_of(("q", "causal"))
        with self.assertRaises(KeyError):
            layouts["attention"].pointer_slots_of(("query",))


class TestConfig(unittest.TestCase):
    def tearDown(self):
        autotune.set_policy(None)
        autotune.set_database(None)

    def test_policies_are_checked_when_set(self):
        for good in ("nearest", "heuristic", "default", "error", "pin:threads=128,vec=8"):
            autotune.set_policy(good)
            self.assertEqual(_config.policy(), good)
        for bad in ("heuristic ", "pin:", "", "NEAREST", 3):
            with self.assertRaises(ValueError):
                autotune.set_policy(bad)

    def test_the_environment_gives_the_defaults(self):
        with env(AUTOTUNE_POLICY="default"):
            self.assertEqual(_config.policy(), "default")
        with env(AUTOTUNE_POLICY="bogus"):
            with self.assertRaisesRegex(ValueError, r"\$AUTOTUNE_POLICY 'bogus'"):
                _config.policy()
        with env(AUTOTUNE_POLICY=None):
            self.assertEqual(_config.policy(), "nearest")
        self.assertIsNone(_config.database())  # the library then reads $AUTOTUNE_DB

    def test_a_change_retires_the_runtimes(self):
        calls = []
        _config.on_change(lambda: calls.append(1))
        try:
            import pathlib
            autotune.set_database(pathlib.Path("/tmp/x.db"))
            self.assertEqual(_config.database(), "/tmp/x.db")
            autotune.set_policy("default")
            self.assertEqual(len(calls), 2)
        finally:
            _config._listeners.pop()


class TestShimAndEntryPoints(unittest.TestCase):
    def test_runtime_python_autotune_runtime_reexports_the_package(self):
        code = ("import sys; sys.path.insert(0, 'runtime/python'); import autotune_runtime as a;"
                " import autotune._runtime as r; assert a.Runtime is r.Runtime;"
                " assert a.ArgsLayout is r.ArgsLayout; print(a.__file__)")
        r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_without_torch_the_entry_points_say_torch_is_missing(self):
        if torch is not None:
            self.skipTest("torch imports here")
        self.assertFalse(autotune.torch_available)
        for name in ("flash_attn_func", "causal_conv1d_fn", "causal_conv1d_update",
                     "causal_conv1d_varlen_states",
                     "selective_scan_fn", "selective_state_update",
                     "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
                     "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
                     "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
                     "mamba_inner_fn"):
            with self.assertRaisesRegex(ModuleNotFoundError, f"autotune.{name} needs PyTorch"):
                getattr(autotune, name)(None)

    def test_drop_in_signatures_are_the_peers(self):
        """Names, order and defaults of the peers' functions (read from the source, so
        this runs without torch)."""
        peers = {
            # causal-conv1d causal_conv1d/causal_conv1d_interface.py
            "causal_conv1d_fn": "x, weight, bias=None, seq_idx=None, initial_states=None, "
                                "return_final_states=False, final_states_out=None, "
                                "activation=None",
            "causal_conv1d_update": "x, conv_state, weight, bias=None, activation=None, "
                                    "cache_seqlens=None, conv_state_indices=None",
            # causal-conv1d causal_conv1d/causal_conv1d_varlen.py
            "causal_conv1d_varlen_states": "x, cu_seqlens, state_len",
            # mamba-ssm mamba_ssm/ops/selective_scan_interface.py (cu_seqlens: newer ones)
            "selective_scan_fn": "u, delta, A, B, C, D=None, z=None, delta_bias=None, "
                                 "delta_softplus=False, return_last_state=False, cu_seqlens=None",
            # mamba-ssm 2.2 mamba_ssm/ops/selective_scan_interface.py (newer ones: cu_seqlens
            # and seq_idx after delta_softplus, keyword-only here)
            "mamba_inner_fn": "xz, conv1d_weight, conv1d_bias, x_proj_weight, "
                              "delta_proj_weight, out_proj_weight, out_proj_bias, A, B=None, "
                              "C=None, D=None, delta_bias=None, B_proj_bias=None, "
                              "C_proj_bias=None, delta_softplus=True, checkpoint_lvl=1, "
                              "b_rms_weight=None, c_rms_weight=None, dt_rms_weight=None, "
                              "b_c_dt_rms_eps=1e-06 | cu_seqlens=None, seq_idx=None",
            # mamba-ssm mamba_ssm/ops/triton/selective_state_update.py
            "selective_state_update": "state, x, dt, A, B, C, D=None, z=None, dt_bias=None, "
                                      "dt_softplus=False, state_batch_indices=None",
            # flash-attn flash_attn/flash_attn_interface.py
            "flash_attn_func": "q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, "
                               "window_size=(-1, -1), softcap=0.0, alibi_slopes=None, "
                               "deterministic=False, return_attn_probs=False",
            "flash_attn_qkvpacked_func": "qkv, dropout_p=0.0, softmax_scale=None, causal=False, "
                                         "window_size=(-1, -1), softcap=0.0, alibi_slopes=None, "
                                         "deterministic=False, return_attn_probs=False",
            "flash_attn_kvpacked_func": "q, kv, dropout_p=0.0, softmax_scale=None, causal=False, "
                                        "window_size=(-1, -1), softcap=0.0, alibi_slopes=None, "
                                        "deterministic=False, return_attn_probs=False",
            "flash_attn_varlen_func": "q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, "
                                      "max_seqlen_k, dropout_p=0.0, softmax_scale=None, "
                                      "causal=False, window_size=(-1, -1), softcap=0.0, "
                                      "alibi_slopes=None, deterministic=False, "
                                      "return_attn_probs=False, block_table=None",
            "flash_attn_varlen_qkvpacked_func": "qkv, cu_seqlens, max_seqlen, dropout_p=0.0, "
                                                "softmax_scale=None, causal=False, "
                                                "window_size=(-1, -1), softcap=0.0, "
                                                "alibi_slopes=None, deterministic=False, "
                                                "return_attn_probs=False",
            "flash_attn_varlen_kvpacked_func": "q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, "
                                               "max_seqlen_k, dropout_p=0.0, softmax_scale=None, "
                                               "causal=False, window_size=(-1, -1), "
                                               "softcap=0.0, alibi_slopes=None, "
                                               "deterministic=False, return_attn_probs=False",
        }
        path = os.path.join(PACKAGE, "autotune", "_dropin.py")
        with open(path) as f:
            tree = ast.parse(f.read())
        constants = {t.targets[0].id: ast.literal_eval(t.value) for t in tree.body
                     if isinstance(t, ast.Assign) and isinstance(t.targets[0], ast.Name)
                     and t.targets[0].id == "_NO_WINDOW"}
        found = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in peers:
                args = node.args.args
                defaults = [None] * (len(args) - len(node.args.defaults)) + node.args.defaults
                parts = []
                for a, d in zip(args, defaults):
                    if d is None:
                        parts.append(a.arg)
                    else:
                        value = constants[d.id] if isinstance(d, ast.Name) else ast.literal_eval(d)
                        parts.append(f"{a.arg}={value!r}")
                found[node.name] = ", ".join(parts)
                if node.args.kwonlyargs:
                    found[node.name] += " | " + ", ".join(
                        f"{a.arg}={ast.literal_eval(d)!r}"
                        for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults))
        self.assertEqual(found, peers)


class TestPackaging(unittest.TestCase):
    def test_pip_builds_a_pure_python_wheel_of_python(self):
        try:
            import setuptools
        except ImportError:
            self.skipTest("setuptools is not installed")
        version = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())
        if version < (61,):
            self.skipTest(f"setuptools {setuptools.__version__} predates pyproject metadata")
        if version < (70, 1):
            import importlib.util
            if importlib.util.find_spec("wheel") is None:  # setuptools < 70.1 builds with it
                self.skipTest(f"setuptools {setuptools.__version__} needs the wheel package "
                              "to build offline (pip install ./python fetches it itself)")
        with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as work:
            # Build from a copy: a build leaves build/ and *.egg-info beside the sources.
            import shutil
            src = os.path.join(work, "python")
            shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns(
                "__pycache__", "*.so", "*.so.*", "build", "*.egg-info"))
            r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                                "--no-build-isolation", "--no-index", "-w", out, src],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
            wheels = [f for f in os.listdir(out) if f.endswith(".whl")]
            self.assertEqual(len(wheels), 1, wheels)
            self.assertTrue(wheels[0].endswith("-py3-none-any.whl"), wheels[0])
            with zipfile.ZipFile(os.path.join(out, wheels[0])) as z:
                names = set(z.namelist())
                metadata = next(z.read(n).decode() for n in names if n.endswith("/METADATA"))
        for module in ("__init__", "_library", "_runtime", "_config", "_ops", "_dropin"):
            self.assertIn(f"autotune/{module}.py", names)
        requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist")]
        self.assertTrue(all("extra ==" in line for line in requires), requires)


class TestHarness(unittest.TestCase):
    """The GPU suite's bookkeeping (tests/python/harness.py)."""

    def test_a_grid_counts_unsupported_pass_wrong_error_and_the_budget(self):
        cases = [{"a": a, "b": b} for a in range(4) for b in range(3)]

        def run(c):
            if c["a"] == 1:
                raise RuntimeError("boom")
            return (c["b"] != 2, "off")

        row = harness.run_grid("op", "grid", cases, lambda c: "feat" if c["a"] == 3 else None,
                               lambda c: c["a"], run, budget_s=None)
        self.assertEqual((row["cases"], row["unsupported"], row["not_run"]), (12, {"feat": 3}, 0))
        self.assertEqual((row["pass"], row["wrong"], row["error"]), (4, 2, 3))
        self.assertEqual(len(row["failures"]), 5)

        def slow(c):
            time.sleep(0.05)
            return True, ""

        row = harness.run_grid("op", "grid", cases, lambda c: None, lambda c: c["a"], slow,
                               budget_s=0.01)
        self.assertEqual(row["pass"], 3)  # one group of three, then the budget is spent
        self.assertEqual(row["not_run"], 9)
        self.assertIn("not_run", row["notes"])

    def test_a_lost_context_stops_the_grid(self):
        def health():
            raise harness.ContextLost("gone")

        with self.assertRaises(harness.ContextLost):
            harness.run_grid("op", "g", [{"a": 1}], lambda c: None, lambda c: 1,
                             lambda c: 1 / 0, None, health=health)

    def test_a_grid_in_threads_counts_as_in_one_thread_in_the_seeded_group_order(self):
        cases = [{"a": a, "b": b} for a in range(12) for b in range(3)]
        seen = set()

        def run(c):
            seen.add(threading.get_ident())
            time.sleep(0.002 * ((c["a"] * 7) % 5))  # groups finish out of order
            if c["a"] == 1 and c["b"] == 0:
                raise RuntimeError("boom")
            return (c["b"] != 2, f"off {c['a']}")

        args = ("op", "grid", cases, lambda c: "feat" if c["a"] == 3 else None,
                lambda c: c["a"], run)
        one = harness.run_grid(*args, budget_s=None, seed=5)
        seen.clear()
        many = harness.run_grid(*args, budget_s=None, seed=5, threads=4)
        self.assertGreater(len(seen), 1)
        for field in ("cases", "pass", "wrong", "error", "unsupported", "not_run", "failures"):
            self.assertEqual(one[field], many[field], field)
        self.assertEqual((many["pass"], many["wrong"], many["error"]), (21, 11, 1))
        self.assertIn("4 threads", many["notes"])

    def test_a_threads_lost_context_is_raised_and_stops_the_groups_not_started(self):
        started = []

        def run(c):
            started.append(c["a"])
            if c["a"] == 0:
                raise harness.ContextLost("gone")
            time.sleep(0.01)
            return True, ""

        cases = [{"a": a} for a in range(40)]
        with self.assertRaises(harness.ContextLost):
            harness.run_grid("op", "g", cases, lambda c: None, lambda c: c["a"], run, None,
                             seed=1, threads=2)
        self.assertLess(len(started), 40)

    def test_an_exception_outside_run_case_in_a_thread_is_that_groups_error(self):
        def health():
            raise ValueError("health check broke")

        cases = [{"a": a} for a in range(4)]
        row = harness.run_grid("op", "g", cases, lambda c: None, lambda c: c["a"],
                               lambda c: 1 / 0 if c["a"] == 2 else (True, ""), None,
                               health=health, threads=3)
        self.assertEqual((row["pass"], row["error"], row["not_run"]), (3, 1, 0))
        self.assertIn("health check broke", row["failures"][0]["detail"])

    def test_a_threaded_grid_stops_starting_groups_when_the_budget_is_spent(self):
        def slow(c):
            time.sleep(0.05)
            return True, ""

        cases = [{"a": a} for a in range(20)]
        row = harness.run_grid("op", "g", cases, lambda c: None, lambda c: c["a"], slow,
                               budget_s=0.01, threads=2)
        self.assertEqual(row["pass"] + row["not_run"], 20)
        self.assertLessEqual(row["pass"], 4)
        self.assertGreaterEqual(row["pass"], 2)

    def test_bad_input_verdicts(self):
        ok = lambda: None  # noqa: E731

        def boom():
            raise ValueError("autotune: x is bad")

        def lost():
            raise RuntimeError("illegal memory access")

        self.assertEqual(harness.judge_bad_input(boom, lambda: True, ok),
                         ("raised", "ValueError: autotune: x is bad"))
        self.assertEqual(harness.judge_bad_input(ok, lambda: True, ok)[0],
                         "accepted (no exception)")
        self.assertEqual(harness.judge_bad_input(boom, lambda: False, ok)[0],
                         "raised, but an input was modified")
        self.assertTrue(harness.judge_bad_input(boom, lambda: True, lost)[0].startswith(
            "context lost"))

    def test_gpu_slugs_and_the_closing_line(self):
        self.assertEqual(harness.gpu_slug("NVIDIA H100 80GB HBM3"), "h100")
        self.assertEqual(harness.gpu_slug("NVIDIA A100-SXM4-80GB"), "a100")
        self.assertEqual(harness.gpu_slug("NVIDIA H200"), "h200")
        lines = []
        t = harness.Tally(out=lines.append)
        t.check("good", lambda: None)
        t.check("bad", lambda: 1 / 0)
        t.check("skipped", lambda: ("skip", "why"))
        self.assertEqual(t.summary(), "1 passed, 1 failed, 1 skipped")
        self.assertTrue(lines[1].startswith("FAIL bad: ZeroDivisionError"))


@unittest.skipIf(torch is None, NO_TORCH)
class TestStreamWorkspaces(unittest.TestCase):
    """Runtime's split-KV workspaces: one per device and stream, replaced by a larger one
    when a call needs more, the graphs' apart and never freed, the oldest stream's dropped
    past _MAX_WORKSPACES (torch.zeros on the CPU here)."""

    def setUp(self):
        from unittest import mock
        self.rt = object.__new__(_runtime.Runtime)
        self.rt.workspaces = {}
        self.rt.graph_workspaces = {}
        self.rt._graphs_outgrown = []
        self.rt._workspace_lock = threading.Lock()
        self.rt._retired = collections.deque(maxlen=_runtime._MAX_WORKSPACES)
        self.made = []
        cpu_zeros = torch.zeros

        def zeros(n, device=None, dtype=None):
            self.made.append(n)
            return cpu_zeros(n, dtype=dtype)

        patcher = mock.patch.object(torch, "zeros", zeros)
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_one_per_stream_grown_when_a_call_needs_more(self):
        rt = self.rt
        first = rt._workspace(0, 0x10, 4096)
        self.assertEqual(rt._workspace(0, 0x10, 4096), first)  # kept, not made again
        self.assertEqual(rt._workspace(0, 0x10, 1000), first)  # a smaller call shares it
        self.assertNotEqual(rt._workspace(0, 0x20, 4096), first)  # another stream
        grown = rt._workspace(0, 0x10, 5000)  # more: twice as large
        self.assertNotEqual(grown, first)
        self.assertEqual(rt._workspace(0, 0x10, 8192), grown)
        self.assertEqual(rt._workspace(0, 0x10, 100), grown)
        self.assertEqual(rt._workspace(0, 0x10, 20000), rt._workspace(0, 0x10, 20000))
        self.assertEqual(self.made, [4096, 4096, 8192, 20000])
        self.assertEqual(len(rt._retired), 2)  # the outgrown ones, kept a while
        for stream in range(0x100, 0x100 + 2 * _runtime._MAX_WORKSPACES):
            rt._workspace(0, stream, 4096)
        self.assertEqual(len(rt.workspaces), _runtime._MAX_WORKSPACES)
        self.assertNotIn((0, 0x10), rt.workspaces)  # the oldest streams' went
        self.assertIn((0, 0x100 + 2 * _runtime._MAX_WORKSPACES - 1), rt.workspaces)

    def test_graphs_share_one_kept_apart_and_outgrown_ones_never_freed(self):
        # Every split-KV signature's first call makes or grows the graphs' buffer: many
        # sizes (a conformance grid, a server's batch sizes) must not drop the workspace
        # of the stream the calls run on, and a graph captured with an outgrown buffer
        # still holds it.
        rt = self.rt
        mine = rt._workspace(0, 0x10, 4096)
        graphs = rt._workspace(0, _runtime._GRAPHS, 4096)
        for size in range(1, 3 * _runtime._MAX_WORKSPACES):
            rt._workspace(0, _runtime._GRAPHS, 4096 + 64 * size)
        self.assertEqual(rt._workspace(0, 0x10, 4096), mine)
        self.assertEqual(len(rt.graph_workspaces), 1)
        self.assertNotEqual(rt._workspace(0, _runtime._GRAPHS, 4096), graphs)
        self.assertEqual(self.made.count(4096), 2)
        self.assertIn(graphs, [b.data_ptr() for b in rt._graphs_outgrown])
        self.assertLessEqual(len(rt._graphs_outgrown), 3)  # doubling: few replacements


@unittest.skipIf(torch is None, NO_TORCH)
class TestKvcacheRotary(unittest.TestCase):
    """flash_attn_with_kvcache's rotary embedding (applied before the launch) against an
    independent float64 complex-number reference, on the CPU."""

    @staticmethod
    def reference(x, cos, sin, positions, interleaved):
        half = cos.shape[1]
        xr = x[..., :2 * half].double()
        if interleaved:
            z = torch.complex(xr[..., 0::2], xr[..., 1::2])
        else:
            z = torch.complex(xr[..., :half], xr[..., half:])
        turn = torch.complex(cos.double(), sin.double())[positions].unsqueeze(2)
        z = z * turn
        if interleaved:
            rot = torch.stack((z.real, z.imag), dim=-1).flatten(-2)
        else:
            rot = torch.cat((z.real, z.imag), dim=-1)
        return torch.cat((rot, x[..., 2 * half:].double()), dim=-1)

    def test_rotation_of_both_pairings(self):
        from autotune import _dropin
        torch.manual_seed(0)
        x = torch.randn(2, 5, 3, 64, dtype=torch.float16)
        angle = torch.rand(40, 16) * 6.2832
        cos, sin = angle.cos().half(), angle.sin().half()
        positions = torch.tensor([[0, 1, 2, 3, 4], [30, 31, 32, 33, 34]])
        for interleaved in (False, True):
            got = _dropin._rotary(x, cos, sin, positions, interleaved)
            want = self.reference(x, cos, sin, positions, interleaved)
            self.assertEqual(got.dtype, x.dtype)
            self.assertTrue(torch.equal(got[..., 32:], x[..., 32:]))  # past rotary_dim
            self.assertLess((got.double() - want).abs().max().item(), 2e-3, interleaved)

    def test_positions_follow_cache_lengths_and_the_causal_convention(self):
        from autotune import _dropin
        torch.manual_seed(1)
        q = torch.randn(2, 3, 4, 32, dtype=torch.bfloat16)
        k = torch.randn(2, 2, 2, 32, dtype=torch.bfloat16)
        angle = torch.rand(100, 8) * 6.2832
        cos, sin = angle.cos().bfloat16(), angle.sin().bfloat16()
        lens = torch.tensor([7, 50], dtype=torch.int32)
        start = lens.long()[:, None]
        for per_row in (True, False):
            q_ro, k_ro = _dropin._kvcache_rotary("f", q, k, cos, sin, False, lens, 100, per_row)
            q_pos = start + torch.arange(3) if per_row else start.expand(-1, 3)
            for got, x, pos in ((q_ro, q, q_pos), (k_ro, k, start + torch.arange(2))):
                want = self.reference(x, cos, sin, pos, False)
                self.assertLess((got.double() - want).abs().max().item(), 3e-2)
        bad = {"no k": dict(k=None), "odd rotary_dim": dict(cos=cos[:, :4], sin=sin[:, :4]),
               "short table": dict(cos=cos[:60], sin=sin[:60]),
               "dtype": dict(cos=cos.float(), sin=sin.float()),
               "batch": dict(k=k[:1])}
        for what, change in bad.items():
            args = dict(k=k, cos=cos, sin=sin)
            args.update(change)
            with self.assertRaises(ValueError, msg=what):
                _dropin._kvcache_rotary("f", q, args["k"], args["cos"], args["sin"], False, lens,
                                        100, True)


@unittest.skipIf(torch is None, NO_TORCH)
class TestTorchRegistration(unittest.TestCase):
    """The torch side without a GPU: registration, fake implementations (meta tensors),
    refusals that happen before any device work."""

    def test_the_operators_are_registered(self):
        for name in ("causal_conv1d", "causal_conv1d_with_states", "selective_scan",
                     "selective_scan_with_state", "attention", "attention_with_lse",
                     "attention_varlen", "attention_varlen_with_lse", "attention_kvcache",
                     "attention_kvcache_with_lse"):
            self.assertTrue(hasattr(torch.ops.autotune, name), name)

    def test_fake_implementations_give_shapes_dtypes_and_contiguous_strides(self):
        m = "meta"
        q = torch.empty(2, 8, 5, 64, device=m, dtype=torch.bfloat16).transpose(1, 2)
        k = torch.empty(2, 7, 2, 64, device=m, dtype=torch.bfloat16)
        o, lse = torch.ops.autotune.attention_with_lse(q, k, k, True)
        self.assertEqual((o.shape, o.dtype, o.is_contiguous()), (q.shape, q.dtype, True))
        self.assertEqual((lse.shape, lse.dtype), ((2, 8, 5), torch.float32))
        x = torch.empty(3, 128, 40, device=m, dtype=torch.float16)[:, :64]
        w = torch.empty(64, 4, device=m)
        y, final = torch.ops.autotune.causal_conv1d_with_states(x, w)
        self.assertEqual((y.shape, y.is_contiguous(), final.shape, final.dtype),
                         ((3, 64, 40), True, (3, 64, 3), torch.float16))
        A = torch.empty(64, 16, device=m)
        s, last = torch.ops.autotune.selective_scan_with_state(x, x, A, A, A)
        self.assertEqual((s.shape, last.shape, last.dtype), ((3, 64, 40), (3, 64, 16),
                                                             torch.float32))
        # varlen: packed [total, heads, headdim]; the LSE [heads, total_q].
        qv = torch.empty(300, 4, 64, device=m, dtype=torch.float16)
        kv = torch.empty(500, 2, 2, 64, device=m, dtype=torch.float16)
        cu = torch.empty(4, device=m, dtype=torch.int32)
        o, lse = torch.ops.autotune.attention_varlen_with_lse(qv, kv[:, 0], kv[:, 1], cu, cu,
                                                              120, 200, True)
        self.assertEqual((o.shape, o.is_contiguous(), lse.shape, lse.dtype),
                         ((300, 4, 64), True, (4, 300), torch.float32))
        # KV cache: out like q [B, Sq, H, D], the LSE [B, H, Sq]; the caches are declared
        # written (the appended rows).
        qd = torch.empty(3, 2, 8, 128, device=m, dtype=torch.bfloat16)
        cache = torch.empty(3, 512, 2, 128, device=m, dtype=torch.bfloat16)
        lens = torch.empty(3, device=m, dtype=torch.int32)
        o, lse = torch.ops.autotune.attention_kvcache_with_lse(qd, cache, cache.clone(), lens)
        self.assertEqual((o.shape, lse.shape), ((3, 2, 8, 128), (3, 8, 2)))
        o, lse = torch.ops.autotune.attention_kvcache_with_lse(qd, cache, cache.clone(), lens,
                                                               cache_leftpad=lens)
        self.assertEqual((o.shape, lse.shape), ((3, 2, 8, 128), (3, 8, 2)))
        slots = torch.empty(5, 512, 2, 128, device=m, dtype=torch.bfloat16)
        o = torch.ops.autotune.attention_kvcache(qd, slots, slots.clone(), lens,
                                                 cache_batch_idx=lens)
        self.assertEqual(o.shape, (3, 2, 8, 128))
        schema = torch.ops.autotune.attention_kvcache.default._schema
        self.assertEqual([a.name for a in schema.arguments if a.is_write],
                         ["k_cache", "v_cache"])
        self.assertEqual([a.name for a in schema.arguments[-2:]],
                         ["cache_leftpad", "cache_batch_idx"])
        self.assertEqual({str(a.type) for a in schema.arguments[-2:]}, {"Optional[Tensor]"})

    def test_cpu_tensors_are_refused_naming_the_argument(self):
        x = torch.zeros(1, 8, 16)
        with self.assertRaisesRegex(ValueError, "x is on cpu"):
            torch.ops.autotune.causal_conv1d(x, torch.zeros(8, 4))
        with self.assertRaisesRegex(ValueError, "x is on cpu"):
            autotune.causal_conv1d_fn(x, torch.zeros(8, 4))
        with self.assertRaisesRegex(ValueError, "x is on cpu"):
            autotune.causal_conv1d_update(x[..., 0], torch.zeros(1, 8, 4), torch.zeros(8, 4))
        with self.assertRaisesRegex(ValueError, "x is on cpu"):
            autotune.selective_state_update(torch.zeros(1, 8, 4), x[..., 0], x[..., 0],
                                            torch.zeros(8, 4), torch.zeros(1, 4),
                                            torch.zeros(1, 4))
        q = torch.zeros(1, 4, 2, 64, dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "q is on cpu"):
            autotune.flash_attn_func(q, q, q)
        cu = torch.zeros(2, dtype=torch.int32)
        with self.assertRaisesRegex(ValueError, "q is on cpu"):
            torch.ops.autotune.attention_varlen(q[0], q[0], q[0], cu, cu, 4, 4)
        with self.assertRaisesRegex(ValueError, "q is on cpu"):
            autotune.flash_attn_varlen_qkvpacked_func(torch.zeros(4, 3, 2, 64), cu, 4)

    def test_unsupported_features_are_refused_by_name(self):
        q = torch.zeros(1, 64, 2, 64, dtype=torch.bfloat16)
        with self.assertRaisesRegex(NotImplementedError, "dropout_p"):
            autotune.flash_attn_func(q, q, q, dropout_p=0.1)
        # window_size, softcap and alibi_slopes are supported; bad values are refused
        # by name before anything reaches the library.
        for kwargs, name in (({"window_size": (-2, 5)}, "window_size"),
                             ({"window_size": (1, 2, 3)}, "window_size"),
                             ({"softcap": -1.0}, "softcap"),
                             ({"softcap": float("nan")}, "softcap"),
                             ({"alibi_slopes": torch.zeros(2, dtype=torch.bfloat16)},
                              "alibi_slopes"),
                             ({"alibi_slopes": [0.5, 0.25]}, "alibi_slopes")):
            with self.assertRaisesRegex((ValueError, TypeError), name):
                autotune.flash_attn_func(q, q, q, **kwargs)
        x = torch.zeros(1, 8, 16)
        with self.assertRaisesRegex(ValueError, "seq_idx is only supported with channel-last"):
            autotune.causal_conv1d_fn(x, torch.zeros(8, 4), seq_idx=torch.zeros(1, 16))
        with self.assertRaisesRegex(NotImplementedError, "activation"):
            autotune.causal_conv1d_fn(x, torch.zeros(8, 4), activation="gelu")
        with self.assertRaisesRegex(NotImplementedError, "activation"):
            autotune.causal_conv1d_update(x[..., 0], torch.zeros(1, 8, 4), torch.zeros(8, 4),
                                          activation="gelu")
        with self.assertRaisesRegex(NotImplementedError, "cu_seqlens"):
            autotune.selective_scan_fn(x, x, x, x, x, cu_seqlens=torch.zeros(2))

    def test_mamba_inner_fn_refuses_by_name_before_anything_runs(self):
        xz, conv_w, conv_b = torch.zeros(1, 16, 32), torch.zeros(8, 1, 4), torch.zeros(8)
        x_proj, dt_proj, out_proj = torch.zeros(2 + 2 * 4, 8), torch.zeros(8, 2), torch.zeros(6, 8)
        A = torch.zeros(8, 4)
        args = (xz, conv_w, conv_b, x_proj, dt_proj, out_proj, None, A)
        cases = (
            (NotImplementedError, "cu_seqlens", args, {"cu_seqlens": torch.zeros(2)}),
            (ValueError, "checkpoint_lvl", args, {"checkpoint_lvl": 2}),
            (TypeError, "A is complex", args[:7] + (A.to(torch.complex64),), {}),
            (TypeError, "xz must be a torch.Tensor", (None,) + args[1:], {}),
            (ValueError, r"xz must be \(batch, 2 \* dim, seqlen\)", (xz[:, :15],) + args[1:], {}),
            (ValueError, r"conv1d_weight must be \(dim, 1, width\)", (xz, conv_w[:, 0]) + args[2:],
             {}),
            (ValueError, "x_proj_weight has 9 rows", args[:3] + (x_proj[:9],) + args[4:], {}),
            (ValueError, "b_rms_weight normalises a variable B",
             args + (torch.zeros(8, 4),), {"b_rms_weight": torch.ones(4)}),
            (ValueError, "x is on cpu", args, {}),  # reaches the convolution's own check
        )
        for error, message, call_args, kwargs in cases:
            with self.subTest(message=message):
                with self.assertRaisesRegex(error, message):
                    autotune.mamba_inner_fn(*call_args, **kwargs)

    def test_causal_conv1d_varlen_states_is_the_peers_reference(self):
        """causal-conv1d's test_causal_conv1d_get_states and its reference (a loop per
        sequence), on CPU tensors: the function is torch operations only."""
        if torch is None:
            self.skipTest("needs torch")

        def ref(x, cu, state_len):
            states = torch.zeros(cu.shape[0] - 1, state_len, x.shape[1],
                                 dtype=x.dtype).transpose(1, 2)
            for i in range(cu.shape[0] - 1):
                end = int(cu[i + 1])
                start = max(int(cu[i]), end - state_len)
                if end > start:
                    states[i, :, -(end - start):] = x[start:end].T
            return states

        torch.manual_seed(0)
        fn = autotune.causal_conv1d_varlen_states
        for dim, dtype, state_len in ((2048, torch.float32, 20), (2064, torch.bfloat16, 20),
                                      (64, torch.float16, 3), (8, torch.float32, 40)):
            lengths = torch.randint(0, 32, (100,))  # empty sequences included
            x = torch.randn(int(lengths.sum()), dim).to(dtype)
            cu = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]).to(torch.int32)
            with self.subTest(dim=dim, dtype=dtype, state_len=state_len):
                out = fn(x, cu, state_len)
                self.assertTrue(torch.equal(out, ref(x, cu, state_len)))
                self.assertEqual(tuple(out.shape), (100, dim, state_len))
                self.assertEqual(out.stride(1), 1)  # dim contiguous, as the peer's
        x = torch.randn(10, 4)
        with self.assertRaisesRegex(ValueError, r"x must be a \(total_tokens, dim\)"):
            fn(x[None], torch.tensor([0, 10]), 3)
        with self.assertRaisesRegex(TypeError, "cu_seqlens must be a"):
            fn(x, torch.tensor([0.0, 10.0]), 3)
        with self.assertRaisesRegex(ValueError, "state_len must be an int >= 0"):
            fn(x, torch.tensor([0, 10]), -1)
        self.assertEqual(tuple(fn(x, torch.tensor([0, 4, 10]), 0).shape), (2, 4, 0))

    def test_varlen_block_table_is_checked_before_anything_runs(self):
        q = torch.zeros(10, 4, 64, dtype=torch.bfloat16)
        pages = torch.zeros(6, 256, 2, 64, dtype=torch.bfloat16)
        cu = torch.tensor([0, 4, 10], dtype=torch.int32)
        table = torch.zeros(2, 3, dtype=torch.int32)
        fn = autotune.flash_attn_varlen_func
        with self.assertRaisesRegex(ValueError, r"k must be \(num_blocks, page_block_size"):
            fn(q, q, q, cu, cu, 6, 6, block_table=table)
        with self.assertRaisesRegex(TypeError, "block_table must be a torch.int32 tensor"):
            fn(q, pages, pages, cu, cu, 6, 300, block_table=table.long())
        with self.assertRaisesRegex(ValueError, r"v must be \(total_tokens"):
            fn(q, q, pages, cu, cu, 6, 300)
        # A good one passes its checks (and these CPU tensors are then refused).
        with self.assertRaisesRegex(ValueError, "q is on cpu"):
            fn(q, pages, pages, cu, cu, 6, 300, block_table=table)

    def test_kvcache_leftpad_is_checked_before_anything_runs(self):
        q = torch.zeros(2, 1, 4, 64, dtype=torch.bfloat16)
        cache = torch.zeros(2, 128, 2, 64, dtype=torch.bfloat16)
        lens = torch.tensor([5, 9], dtype=torch.int32)
        table = torch.zeros(2, 1, dtype=torch.int32)
        fn = autotune.flash_attn_with_kvcache
        with self.assertRaisesRegex(ValueError, "cache_leftpad is not supported with a paged"):
            fn(q, cache, cache, cache_seqlens=lens, cache_leftpad=lens, block_table=table)
        with self.assertRaisesRegex(TypeError, "cache_leftpad must be a torch.int32 tensor"):
            fn(q, cache, cache, cache_seqlens=lens, cache_leftpad=lens.long())
        with self.assertRaisesRegex(TypeError, "cache_leftpad must be a torch.int32 tensor"):
            fn(q, cache, cache, cache_seqlens=lens, cache_leftpad=[0, 1])
        with self.assertRaisesRegex(ValueError, r"cache_leftpad must be \(2,\)"):
            fn(q, cache, cache, cache_seqlens=lens, cache_leftpad=lens[:1])
        with self.assertRaisesRegex(ValueError, r"cache_leftpad must be \(2,\)"):
            fn(q, cache, cache, cache_seqlens=lens, cache_leftpad=lens[None])
        # cache_batch_idx is checked the same way.
        with self.assertRaisesRegex(ValueError, "cache_batch_idx is not supported with a paged"):
            fn(q, cache, cache, cache_seqlens=lens, cache_batch_idx=lens, block_table=table)
        with self.assertRaisesRegex(TypeError, "cache_batch_idx must be a torch.int32 tensor"):
            fn(q, cache, cache, cache_seqlens=lens, cache_batch_idx=lens.long())
        with self.assertRaisesRegex(ValueError, r"cache_batch_idx must be \(2,\)"):
            fn(q, cache, cache, cache_seqlens=lens, cache_batch_idx=lens[:1])
        # A good one passes its checks (and these CPU tensors are then refused).
        with self.assertRaisesRegex(ValueError, "q is on cpu"):
            fn(q, cache, cache, cache_seqlens=lens, cache_leftpad=torch.zeros_like(lens))
        slots = torch.zeros(5, 128, 2, 64, dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "q is on cpu"):
            fn(q, slots, slots, cache_seqlens=lens, cache_batch_idx=torch.tensor(
                [4, 1], dtype=torch.int32))

    def test_kvcache_head_dims_the_kernels_do_not_build_run_padded(self):
        from autotune import _dropin
        torch.manual_seed(2)
        for d, built in ((59, 64), (20, 32), (8, 32), (250, 256)):
            q = torch.randn(2, 3, 4, d, dtype=torch.float16)
            k_cache, v_cache = (torch.randn(2, 40, 2, d, dtype=torch.float16) for _ in range(2))
            k, v = (torch.randn(2, 3, 2, d, dtype=torch.float16) for _ in range(2))
            keep = k_cache.clone(), v_cache.clone()
            qp, kcp, vcp, kp, vp, scale, head_dim = _dropin._kvcache_pad_head_dim(
                q, k_cache, v_cache, k, v, None)
            self.assertEqual(head_dim, d)
            self.assertAlmostEqual(scale, d ** -0.5)
            for got, was in ((qp, q), (kcp, k_cache), (vcp, v_cache), (kp, k), (vp, v)):
                self.assertEqual(got.shape[:-1] + (got.shape[-1],), was.shape[:-1] + (built,))
                self.assertTrue(torch.equal(got[..., :d], was))
                self.assertFalse(got[..., d:].any())
            # The kernel appends into the padded copies; the caller's caches get them back.
            kcp[:, 10:13] = kp
            vcp[:, 10:13] = vp
            out = torch.randn(2, 3, 4, built, dtype=torch.float16)
            lse = torch.randn(2, 4, 3)
            got, got_lse = _dropin._kvcache_cut_head_dim((out, lse), d, True, (k_cache, v_cache),
                                                         (kcp, vcp), True)
            self.assertTrue(torch.equal(got, out[..., :d]))
            self.assertIs(got_lse, lse)
            self.assertTrue(torch.equal(k_cache[:, 10:13], k))
            self.assertTrue(torch.equal(v_cache[:, 10:13], v))
            self.assertTrue(torch.equal(k_cache[:, :10], keep[0][:, :10]))
            self.assertTrue(torch.equal(v_cache[:, 13:], keep[1][:, 13:]))
        # A given scale is kept; without new keys nothing is written back.
        q = torch.randn(1, 1, 2, 59)
        cache = torch.randn(1, 16, 2, 59)
        *_, scale, head_dim = _dropin._kvcache_pad_head_dim(q, cache, cache, None, None, 0.5)
        self.assertEqual((scale, head_dim), (0.5, 59))
        before = cache.clone()
        _dropin._kvcache_cut_head_dim(torch.zeros(1, 1, 2, 64), 59, False, (cache, cache),
                                      (torch.ones(1, 16, 2, 64),) * 2, False)
        self.assertTrue(torch.equal(cache, before))
        # Head dims that disagree are left to the library to refuse by name.
        self.assertIsNone(_dropin._kvcache_pad_head_dim(q, torch.zeros(1, 16, 2, 60), cache,
                                                        None, None, None)[-1])


@unittest.skipIf(torch is None, NO_TORCH)
class TestMambaInnerComposition(unittest.TestCase):
    """mamba_inner_fn's plumbing on CPU, the two kernels swapped for float64 references:
    what it hands the conv and the scan (views, B/C from the projection, biases, RMS
    norms, autocast casts) and what it does with their results, against the same block
    computed one sequence at a time with plain matrix products."""

    @staticmethod
    def conv(x, weight, bias=None, seq_idx=None, activation=None):
        assert activation == "silu" and seq_idx is None
        out = torch.nn.functional.conv1d(x, weight.unsqueeze(1), bias, padding=weight.shape[1] - 1,
                                         groups=weight.shape[0])[..., :x.shape[-1]]
        return torch.nn.functional.silu(out)

    @staticmethod
    def scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
        delta = delta + delta_bias[:, None]
        delta = torch.nn.functional.softplus(delta) if delta_softplus else delta
        Bv = B[:, 0] if B.dim() == 4 else B  # (batch, dstate, L) or fixed (dim, dstate)
        Cv = C[:, 0] if C.dim() == 4 else C
        h = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
        ys = []
        for t in range(u.shape[2]):
            bt = Bv[:, None, :, t] if B.dim() == 4 else Bv[None]
            ct = Cv[:, None, :, t] if C.dim() == 4 else Cv[None]
            h = torch.exp(delta[:, :, t, None] * A) * h + (delta[:, :, t] * u[:, :, t])[..., None] * bt
            ys.append((h * ct).sum(-1))
        y = torch.stack(ys, -1) + u * D[:, None]
        return y * torch.nn.functional.silu(z)

    def setUp(self):
        from autotune import _dropin
        self.dropin = _dropin
        self.saved = (_dropin.causal_conv1d_fn, _dropin.selective_scan_fn)
        _dropin.causal_conv1d_fn, _dropin.selective_scan_fn = self.conv, self.scan

    def tearDown(self):
        self.dropin.causal_conv1d_fn, self.dropin.selective_scan_fn = self.saved

    def expected(self, xz, p, var_b, var_c, rms):
        """One sequence at a time: conv, then rows of (dt, B, C) = x_t W_x^T."""
        outs = []
        r, n = p["delta_proj_weight"].shape[1], p["A"].shape[1]
        for b in range(xz.shape[0]):
            x, z = xz[b:b + 1].chunk(2, dim=1)
            x = self.conv(x, p["conv1d_weight"][:, 0], p["conv1d_bias"], activation="silu")[0]
            rows = x.t() @ p["x_proj_weight"].t()  # (L, r + n_var * n)
            dt = rows[:, :r] @ p["delta_proj_weight"].t()  # (L, dim)
            Bm = rows[:, r:r + n] + p["B_proj_bias"] if var_b else p["B"]
            Cm = rows[:, -n:] + p["C_proj_bias"] if var_c else p["C"]

            def norm(v, w):
                return v * torch.rsqrt(v.square().mean(-1, keepdim=True) + 1e-6) * w
            if rms:  # the variable ones (a fixed B or C takes no norm)
                Bm = norm(Bm, p["b_rms_weight"]) if var_b else Bm
                Cm = norm(Cm, p["c_rms_weight"]) if var_c else Cm
                dt = norm(dt, p["dt_rms_weight"])
            Bm = Bm.t()[None, None] if var_b else Bm
            Cm = Cm.t()[None, None] if var_c else Cm
            y = self.scan(x[None], dt.t()[None], p["A"], Bm, Cm, p["D"], z, p["delta_bias"],
                          True)[0]
            outs.append(y.t() @ p["out_proj_weight"].t() + p["out_proj_bias"])
        return torch.stack(outs)

    def test_the_block_matches_one_sequence_at_a_time(self):
        f64 = torch.float64
        for var_b, var_c, rms, block in ((True, True, False, True), (False, True, False, False),
                                         (True, False, True, True), (False, False, False, False),
                                         (True, True, True, False)):
            with self.subTest(var_b=var_b, var_c=var_c, rms=rms, block=block):
                torch.manual_seed(int(var_b) + 2 * int(var_c) + 4 * int(rms))
                batch, dim, seqlen, n, r = 3, 12, 9, 4, 2
                xz = torch.randn(2 * dim, batch, seqlen, dtype=f64).permute(1, 0, 2) if block \
                    else torch.randn(batch, 2 * dim, seqlen, dtype=f64)
                p = dict(conv1d_weight=torch.randn(dim, 1, 4, dtype=f64) / 2,
                         conv1d_bias=torch.randn(dim, dtype=f64) / 2,
                         x_proj_weight=torch.randn(r + n * (var_b + var_c), dim, dtype=f64) / 3,
                         delta_proj_weight=torch.randn(dim, r, dtype=f64),
                         out_proj_weight=torch.randn(5, dim, dtype=f64) / 3,
                         out_proj_bias=torch.randn(5, dtype=f64),
                         A=-torch.rand(dim, n, dtype=f64) - 0.1,
                         B=None if var_b else torch.randn(dim, n, dtype=f64),
                         C=None if var_c else torch.randn(dim, n, dtype=f64),
                         D=torch.randn(dim, dtype=f64), delta_bias=torch.randn(dim, dtype=f64),
                         B_proj_bias=torch.randn(n, dtype=f64) if var_b else None,
                         C_proj_bias=torch.randn(n, dtype=f64) if var_c else None)
                if rms:
                    p.update(b_rms_weight=torch.rand(n, dtype=f64) + 0.5 if var_b else None,
                             c_rms_weight=torch.rand(n, dtype=f64) + 0.5 if var_c else None,
                             dt_rms_weight=torch.rand(dim, dtype=f64) + 0.5)
                out = autotune.mamba_inner_fn(xz, **p)
                self.assertEqual(out.shape, (batch, seqlen, 5))
                torch.testing.assert_close(out, self.expected(xz, p, var_b, var_c, rms))

    def test_under_autocast_the_projection_weights_are_cast(self):
        torch.manual_seed(0)
        xz = torch.randn(1, 8, 6, dtype=torch.bfloat16)
        p = dict(conv1d_weight=torch.randn(4, 1, 3), conv1d_bias=torch.randn(4),
                 x_proj_weight=torch.randn(1 + 2 * 2, 4), delta_proj_weight=torch.randn(4, 1),
                 out_proj_weight=torch.randn(3, 4), out_proj_bias=torch.randn(3),
                 A=-torch.rand(4, 2), D=torch.randn(4), delta_bias=torch.randn(4))
        enabled = []
        real = self.dropin._autocast_enabled, self.dropin._autocast_dtype
        self.dropin._autocast_enabled = lambda: enabled.append(1) or True
        self.dropin._autocast_dtype = lambda: torch.bfloat16
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = autotune.mamba_inner_fn(xz, **p)
        finally:
            self.dropin._autocast_enabled, self.dropin._autocast_dtype = real
        self.assertEqual(enabled, [1])
        self.assertEqual(out.dtype, torch.bfloat16)
        self.assertTrue(torch.isfinite(out).all())


@unittest.skipIf(torch is None, NO_TORCH)
class TestCallPlans(unittest.TestCase):
    """The per-signature plans of the warm call path (python/autotune/_calls.py) on CPU
    tensors, the library's call functions replaced by one that records the args struct
    it is given: a warm call must pass exactly the bytes a full pack of the same call
    gives."""

    def setUp(self):
        path = library_path()
        if not path:
            self.skipTest("no built libautotune.so (set AUTOTUNE_LIBRARY)")
        from autotune import _calls
        self.calls_mod = _calls
        self.library = _runtime.Library.load(path)
        self.seen = []
        self.status = 0

        def record(handle, args, stream):
            op = self.op
            self.seen.append(ctypes_string_at(args, self.library.layouts[op].size))
            return self.status

        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_void_p)
        self.callback = proto(record)
        fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.cast(self.callback, ctypes.c_void_p).value)
        fn.argtypes = None
        test = self

        def refuse(status):
            raise _runtime.AutotuneError(status, "refused by the fake library")

        class FakeRuntime:
            library = types.SimpleNamespace(calls={op: fn for op in _runtime.OPS}, check=refuse)
            layouts = self.library.layouts
            handle = ctypes.c_void_p(0x1234)

            def attention_workspace(self, key, fields, q, features=None):
                test.workspace_asked += 1
                return (0xABC000, 4096)

            def stream_workspace(self, device, need):
                test.stream_workspaces.append((device, need))
                return 0xABC000

        self.rt = FakeRuntime()
        self.workspace_asked = 0
        self.stream_workspaces = []
        self.plans = _calls.Plans()
        _calls._load_torch()
        self.saved_stream = _calls._raw_stream
        _calls._raw_stream = lambda device: 0
        self.runtime_for = lambda index, t, what: self.rt

    def tearDown(self):
        self.calls_mod._raw_stream = self.saved_stream

    def full_pack(self, op, values):
        layout = self.library.layouts[op]
        buf = bytearray(layout.size)
        layout.struct.pack_into(buf, 0, *values)
        return bytes(buf)

    def test_a_warm_conv_call_passes_the_bytes_of_a_full_pack(self):
        self.op = "causal_conv1d"
        f = _runtime.tensor_fields
        conv = self.calls_mod.conv
        x = torch.randn(2, 64, 40, dtype=torch.bfloat16)[:, :32]
        w, b = torch.randn(32, 4, dtype=torch.bfloat16), torch.randn(32, dtype=torch.bfloat16)
        out1, final1 = conv(self.plans, self.runtime_for, x, w, b, None, True, True)
        self.assertEqual(len(self.plans.conv), 1)
        x2 = torch.randn(2, 64, 40, dtype=torch.bfloat16)[:, 32:]  # same signature
        out2, final2 = conv(self.plans, self.runtime_for, x2, w.clone(), b.clone(), None, True,
                            True)
        self.assertEqual(len(self.plans.conv), 1)
        self.assertEqual((out2.shape, out2.is_contiguous(), final2.shape, final2.dtype),
                         ((2, 32, 40), True, (2, 32, 3), torch.bfloat16))
        # The second call's struct is the full pack of the second call's tensors.
        self.seen.clear()
        w2, b2 = w.clone(), b.clone()
        out3, final3 = conv(self.plans, self.runtime_for, x2, w2, b2, None, True, True)
        expected = self.full_pack("causal_conv1d", (
            *f(x2, "x"), *f(w2, "weight"), *f(b2, "bias"), *_runtime._ABSENT, *f(out3, "out"),
            *f(final3, "final_states"), 1, *_runtime._ABSENT))
        self.assertEqual(self.seen[0], expected)

    def test_a_new_stride_dtype_or_flag_is_a_new_plan(self):
        self.op = "causal_conv1d"
        conv = self.calls_mod.conv
        x = torch.randn(2, 32, 40)
        w = torch.randn(32, 4)
        conv(self.plans, self.runtime_for, x, w, None, None, False, False)
        conv(self.plans, self.runtime_for, x, w, None, None, True, False)
        conv(self.plans, self.runtime_for, x.half(), w, None, None, True, False)
        conv(self.plans, self.runtime_for, torch.randn(2, 64, 40)[:, ::2], w, None, None, True,
             False)
        conv(self.plans, self.runtime_for, x, w, None, None, True, False)
        self.assertEqual(len(self.plans.conv), 4)

    def test_a_refused_first_call_keeps_no_plan_and_raises_every_time(self):
        self.op = "causal_conv1d"
        self.status = 1
        x, w = torch.randn(2, 32, 40), torch.randn(32, 4)
        for _ in range(2):
            with self.assertRaisesRegex(_runtime.AutotuneError, "refused"):
                self.calls_mod.conv(self.plans, self.runtime_for, x, w, None, None, True,
                                    False)
        self.assertEqual(len(self.plans.conv), 0)
        self.assertEqual(len(self.seen), 2)

    def test_not_a_tensor_is_refused_by_name_on_the_first_call_path(self):
        self.op = "selective_scan"
        u = torch.randn(2, 8, 16)
        with self.assertRaisesRegex(TypeError, "B must be a torch.Tensor"):
            self.calls_mod.scan(self.plans, self.runtime_for, u, u, torch.randn(8, 4), [1],
                                torch.randn(8, 4), None, None, None, True, False)

    def test_a_warm_attention_and_scan_call_pass_the_bytes_of_a_full_pack(self):
        f, a = _runtime.tensor_fields, _runtime.attention_fields
        self.op = "attention"
        q = torch.randn(2, 8, 4, 64, dtype=torch.float16).transpose(1, 2)  # [B, S, H, D] view
        k = torch.randn(2, 5, 2, 64, dtype=torch.float16)
        for _ in range(2):
            self.seen.clear()
            out, lse = self.calls_mod.attention(self.plans, self.runtime_for, q, k, k.clone(),
                                                True, 0.5, True)
        self.assertEqual(self.workspace_asked, 1)
        # The warm call asked for the calling stream's workspace (the first call's came
        # with its size).
        self.assertEqual(self.stream_workspaces, [(-1, 4096)])
        self.assertEqual((out.shape, out.is_contiguous(), lse.shape, lse.dtype),
                         (q.shape, True, (2, 8, 4), torch.float32))
        expected_prefix = (*a(q, "q"), *a(k, "k"))
        got = self.seen[0]
        layout = self.library.layouts["attention"]
        values = layout.struct.unpack_from(got)
        self.assertEqual(values[:len(expected_prefix)], expected_prefix)
        # q, k, v, o, lse (11 fields each), then causal, scale, the workspace, and the
        # features: no window, no softcap, no slopes; then every varlen and KV cache field
        # absent (zero).
        self.assertEqual(values[55:59], (1, 0.5, 0xABC000, 4096))
        self.assertEqual(values[59:63], (0, -1, -1, 0.0))
        self.assertEqual(values[63:63 + len(_runtime._ABSENT)], _runtime._ABSENT)
        self.assertFalse(any(values[63 + len(_runtime._ABSENT):]))
        self.assertEqual(values[33], out.data_ptr())
        self.assertEqual(values[44], lse.data_ptr())
        # With a window, softcap and slopes: a warm call writes the new slopes' pointer.
        for _ in range(2):
            slopes = torch.rand(4)
            self.seen.clear()
            out = self.calls_mod.attention(self.plans, self.runtime_for, q, k, k.clone(), True,
                                           0.5, False, None, (16, -1), 5.0, slopes)
        values = layout.struct.unpack_from(self.seen[0])
        self.assertEqual(values[59:63], (1, 16, -1, 5.0))
        self.assertEqual(values[63:74], f(slopes, "alibi_slopes"))
        self.assertEqual(values[33], out.data_ptr())
        self.op = "selective_scan"
        u = torch.randn(2, 8, 16, dtype=torch.bfloat16)
        A, Bm = torch.randn(8, 4), torch.randn(2, 4, 16, dtype=torch.bfloat16)
        D = torch.randn(8)
        for _ in range(2):
            self.seen.clear()
            out = self.calls_mod.scan(self.plans, self.runtime_for, u, u, A, Bm, Bm, D, None,
                                      None, True, False)
        expected = self.full_pack("selective_scan", (
            *f(u, "u"), *f(u, "delta"), *f(A, "A"), *f(Bm, "B"), *f(Bm, "C"), *f(D, "D"),
            *_runtime._ABSENT, *_runtime._ABSENT, *f(out, "out"), *_runtime._ABSENT, 1))
        self.assertEqual(self.seen[0], expected)

    def test_plans_are_per_thread_and_clear_empties_every_threads(self):
        self.op = "causal_conv1d"
        x, w = torch.randn(2, 32, 40), torch.randn(32, 4)
        conv = self.calls_mod.conv
        conv(self.plans, self.runtime_for, x, w, None, None, True, False)
        sizes = []
        release = threading.Event()

        def other():
            conv(self.plans, self.runtime_for, x, w, None, None, True, False)
            sizes.append(len(self.plans.conv))
            release.wait(10)
            sizes.append(len(self.plans.conv))

        t = threading.Thread(target=other)
        t.start()
        while not sizes:
            time.sleep(0.01)
        self.plans.clear()
        release.set()
        t.join()
        self.assertEqual(sizes, [1, 0])
        self.assertEqual(len(self.plans.conv), 0)

    def test_the_drop_in_copies_on_a_first_call_only_what_the_peer_copies(self):
        self.op = "causal_conv1d"
        from autotune import _dropin
        # channel-last x is read in place; x with neither dimension contiguous is copied
        x_cl = torch.randn(2, 40, 32).transpose(1, 2)
        x_strided = torch.randn(2, 32, 80)[:, :, ::2]
        w = torch.randn(4, 32).t()  # not contiguous
        for x in (x_cl, x_strided):
            self.calls_mod.conv(self.plans, self.runtime_for, x, w, None, None, True, False,
                                _dropin._conv_copies)
        keys = sorted(self.plans.conv, key=lambda k: k[2])
        self.assertEqual([(k[2], k[5]) for k in keys],
                         [((1280, 1, 32), (4, 1)), ((1280, 40, 1), (4, 1))])


@unittest.skipIf(torch is None, NO_TORCH)
class TestWarmCallsLeaveNothingToCollect(unittest.TestCase):
    """Warm calls through every entry point a model or a compiled graph uses (Runtime's
    methods, the drop-ins, the registered operators' implementations) on CPU tensors, the
    library's call function replaced by a C function that returns 0 without Python
    (libc's memcmp: the warm path calls it as memcmp(handle, args, NULL) on the default
    stream, which compares 0 bytes): no GC-tracked object survives a call, a run of calls
    starts no garbage collection, and one call raises generation 0's count (what starts
    a collection) by at most 2 per tensor of its signature (its shape and strides, read
    for the plan's key) and 6 more (the key, the outputs, the argument tuples of torch's
    and ctypes' calls), counted after a full collection has emptied the free lists
    (with them filled, as in a loop of calls, it is less: 3 for conv and attention, 9
    for the scan, at the time of writing)."""

    CALLS = 1000

    def setUp(self):
        path = library_path()
        if not path:
            self.skipTest("no built libautotune.so (set AUTOTUNE_LIBRARY)")
        from unittest import mock
        from autotune import _ops
        layouts = _runtime.Library.load(path).layouts
        libc = ctypes.CDLL(None)
        stub = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.cast(libc.memcmp, ctypes.c_void_p).value)
        library = types.SimpleNamespace(calls={op: stub for op in _runtime.OPS}, check=None)

        class FakeRuntime:
            def attention_workspace(self, key, fields, q, features=None):
                return (0, 0)

        fake = FakeRuntime()
        fake.library, fake.layouts, fake.handle = library, layouts, ctypes.c_void_p(0x1234)
        # A Runtime as __init__ leaves it, on the stub (no driver here): its methods' warm
        # path is what is measured.
        rt = object.__new__(_runtime.Runtime)
        rt.library, rt.layouts, rt.handle = library, layouts, ctypes.c_void_p(0x1234)
        rt.lib = types.SimpleNamespace(autotune_runtime_destroy=lambda handle: None)
        rt.attention_workspace = fake.attention_workspace
        rt._calls, rt.plans, rt._served_by = _calls, _calls.Plans(), _runtime._ServedBy(rt)
        self.rt = rt
        _calls._load_torch()
        for target, name, value in (
                (_calls, "_raw_stream", lambda device: 0),
                (_ops, "_device", lambda index, t, what: fake),
                (_ops, "_plans", _calls.Plans()),  # the drop-ins' and operators' plans
                (_runtime.Runtime, "_runtime_for", lambda self, index, t, what: self)):
            patcher = mock.patch.object(target, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)
        threshold = gc.get_threshold()
        self.addCleanup(gc.set_threshold, *threshold)
        self.started = []

        def count(phase, info):
            if phase == "start":
                self.started.append(info["generation"])

        gc.callbacks.append(count)
        self.addCleanup(gc.callbacks.remove, count)

    def cases(self):
        """(name, call, tensors in its signature)."""
        from autotune import _ops
        rt, bf16 = self.rt, torch.bfloat16
        x, w, b = (torch.randn(1, 64, 256, dtype=bf16), torch.randn(64, 4, dtype=bf16),
                   torch.randn(64, dtype=bf16))
        q = torch.randn(1, 128, 4, 64, dtype=bf16)
        k, v = torch.randn_like(q), torch.randn_like(q)
        u, dt = torch.randn(1, 64, 256, dtype=bf16), torch.randn(1, 64, 256, dtype=bf16)
        A, Bm, Cm = torch.randn(64, 16), torch.randn(1, 16, 256, dtype=bf16), \
            torch.randn(1, 16, 256, dtype=bf16)
        D, z, db = torch.rand(64), torch.randn(1, 64, 256, dtype=bf16), torch.rand(64)
        return [
            ("Runtime.causal_conv1d", lambda: rt.causal_conv1d(x, w, b, silu=True), 3),
            ("Runtime.attention", lambda: rt.attention(q, k, v, causal=True), 3),
            ("Runtime.selective_scan", lambda: rt.selective_scan(
                u, dt, A, Bm, Cm, D=D, z=z, delta_bias=db, delta_softplus=True), 8),
            ("causal_conv1d_fn", lambda: autotune.causal_conv1d_fn(x, w, b, activation="silu"),
             3),
            ("causal_conv1d_fn final states", lambda: autotune.causal_conv1d_fn(
                x, w, b, activation="silu", return_final_states=True), 3),
            ("flash_attn_func", lambda: autotune.flash_attn_func(q, k, v, causal=True), 3),
            ("selective_scan_fn", lambda: autotune.selective_scan_fn(
                u, dt, A, Bm, Cm, D, z=z, delta_bias=db, delta_softplus=True), 8),
            ("selective_scan_fn last state", lambda: autotune.selective_scan_fn(
                u, dt, A, Bm, Cm, D, z=z, delta_bias=db, delta_softplus=True,
                return_last_state=True), 8),
            ("causal_conv1d op", lambda: _ops.causal_conv1d(x, w, b, None, True), 3),
            ("causal_conv1d_with_states op",
             lambda: _ops.causal_conv1d_with_states(x, w, b, None, True), 3),
            ("attention op", lambda: _ops.attention(q, k, v, True), 3),
            ("attention_with_lse op", lambda: _ops.attention_with_lse(q, k, v, True), 3),
            ("selective_scan op",
             lambda: _ops.selective_scan(u, dt, A, Bm, Cm, D, z, db, True), 8),
            ("selective_scan_with_state op",
             lambda: _ops.selective_scan_with_state(u, dt, A, Bm, Cm, D, z, db, True), 8),
        ]

    def most_held(self, call):
        """How far one call raises generation 0's count: the least threshold under which
        it starts no collection."""
        for limit in range(1, 100):
            if self.starts_no_collection(call, limit):
                return limit
        return 100

    def starts_no_collection(self, call, limit):
        """Whether a call starts no collection with generation 0's count at 0 and its
        threshold at limit. The full collection that zeroes the count also empties the
        free lists, so that every tuple the call makes is a new object that counts (one
        taken from a free list would not)."""
        gc.collect()
        self.started.clear()
        gc.set_threshold(limit)
        call()
        gc.set_threshold(700)
        return not self.started

    def check(self, only=None):
        for name, call, tensors in self.cases():
            if only is not None and not name.startswith(only):
                continue
            with self.subTest(name):
                for _ in range(3):  # the first call makes the plan
                    call()
                bound = 2 * tensors + 6
                if not self.starts_no_collection(call, bound):
                    self.fail(f"a warm call raises generation 0's count by "
                              f"{self.most_held(call)}, more than {bound}")
                gc.set_threshold(700, 10, 10)
                gc.collect(0)  # generation 0's count back to 0
                self.started.clear()
                count0, objects0 = gc.get_count()[0], len(gc.get_objects())
                for _ in range(self.CALLS):
                    call()
                count1, objects1 = gc.get_count()[0], len(gc.get_objects())
                # One object left per call would be 1000 here, and a collection.
                self.assertLess(objects1 - objects0, 20, "GC-tracked objects left behind")
                self.assertLess(count1 - count0, 20, "generation 0 grows with the calls")
                self.assertEqual(self.started, [], "collections during the warm calls")

    def test_under_no_grad(self):
        with torch.no_grad():
            self.check()

    def test_drop_ins_in_grad_mode_with_no_input_requiring_grad(self):
        self.check(only=("causal_conv1d_fn", "flash_attn_func", "selective_scan_fn"))

    def test_the_drop_ins_take_the_warm_path(self):
        """The drop-ins' eager calls reach the plans (a plan per signature, reused)."""
        from autotune import _ops
        with torch.no_grad():
            for name, call, _ in self.cases():
                if name == "flash_attn_func":
                    call()
                    call()
        self.assertEqual(len(_ops._plans.attn), 1)


def ctypes_string_at(address, size):
    import ctypes
    return ctypes.string_at(address, size)


if __name__ == "__main__":
    unittest.main()
