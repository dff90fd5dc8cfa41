"""pytest entry to the GPU suite of the Python package (the checks live in
gpu_checks.py; run_gpu.py runs the same ones without pytest and writes the results
files). Skipped without torch or a CUDA device.

    AUTOTUNE_LIBRARY=$PWD/.device/libautotune.so python3 -m pytest tests/python/test_gpu.py

AUTOTUNE_TEST_BUDGET_S (default 130) is the time shared by the conformance grids.
"""
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="the GPU checks need PyTorch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_checks as g  # noqa: E402

g.setup(os.environ.get("AUTOTUNE_LIBRARY"))
BUDGET_S = float(os.environ.get("AUTOTUNE_TEST_BUDGET_S", "130"))


@pytest.mark.parametrize("name", list(g.GRIDS))
def test_conformance(name):
    row = g.conformance(name, BUDGET_S * g.GRIDS[name][6])
    assert row["wrong"] == 0 and row["error"] == 0, row["failures"][:5]
    assert row["pass"] > 0, "no supported case ran"


@pytest.mark.parametrize("name", list(g.OTHER_CHECKS))
def test_check(name):
    g.OTHER_CHECKS[name]()


def test_bad_input():
    rows = g.bad_input()
    bad = [r for r in rows if r["verdict"] != "raised"]
    assert not bad, bad
