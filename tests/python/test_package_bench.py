"""CPU checks of the benchmark scripts' shape draws (bench/unseen.py, bench/headline.py),
run by ctest python_package (its pattern test_package*.py) without torch or a GPU: the
draws are deterministic, realistic, and never a benchmark-grid shape; the subsets of the
headline comparison are valid indices.
"""
import importlib.util
import json
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.normpath(os.path.join(HERE, "..", "..", "bench"))


def load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(BENCH, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


unseen = load("unseen")
headline = load("headline")


class UnseenDraws(unittest.TestCase):
    def draws(self, op, seed=2026, count=12):
        return unseen.draw(op, seed, count, unseen.grid_texts(op))

    def test_deterministic_and_not_in_grid(self):
        for op in unseen.OPS:
            with self.subTest(op=op):
                a, b = self.draws(op), self.draws(op)
                self.assertEqual(a, b)
                self.assertGreaterEqual(len(a), 12)
                texts = [unseen.shape_text(op, s) for s in a]
                self.assertEqual(len(set(texts)), len(texts), "a shape drawn twice")
                grid = unseen.grid_texts(op)
                self.assertTrue(grid)
                self.assertFalse(set(texts) & grid)
                self.assertNotEqual(a, self.draws(op, seed=7))

    def test_grid_texts_cover_the_grid(self):
        self.assertEqual(len(unseen.grid_texts("attention")), 51)
        self.assertEqual(len(unseen.grid_texts("causal_conv1d")), 5)
        self.assertEqual(len(unseen.grid_texts("selective_scan")), 4)

    def test_realistic_ranges(self):
        for s in self.draws("causal_conv1d"):
            self.assertTrue(1 <= s["B"] <= 64 and s["W"] in (2, 3, 4))
        scan = self.draws("selective_scan")
        for s in scan:
            self.assertTrue(1 <= s["B"] <= 64)
            self.assertIn(s["D"], (1536, 2048, 2560, 3072, 4096, 5120))
            self.assertEqual(s["N"], 16)
        self.assertTrue(any(s["L"] % 2 for s in scan), "no odd length")
        att = self.draws("attention")
        for s in att:
            self.assertTrue(1 <= s["B"] <= 64 and 8 <= s["Hq"] <= 64)
            self.assertIn(s["D"], (64, 128))
            self.assertEqual(s["Hq"] % s["Hkv"], 0)
            self.assertTrue(s["Hkv"] == s["Hq"] or s["Hkv"] in (1, 4, 8))
            self.assertLessEqual(s["Sq"], s["Sk"])
        self.assertTrue(any(s["Sq"] < s["Sk"] for s in att))
        self.assertTrue(any(s["Sq"] == s["Sk"] for s in att))
        self.assertTrue(any(s["causal"] for s in att) and not all(s["causal"] for s in att))
        self.assertTrue(any(s["Hkv"] < s["Hq"] for s in att), "no GQA/MQA shape")

    def test_conv_draw_of_the_first_results(self):
        # bench/results/<gpu>-unseen.json's causal_conv1d rows were drawn with seed 2026:
        # the same seed still gives the same shapes, so old and new rows compare.
        path = os.path.join(BENCH, "results", "h100-unseen.json")
        if not os.path.exists(path):
            self.skipTest("no h100-unseen.json")
        with open(path) as f:
            rows = [r for r in json.load(f)["rows"] if r["op"] == "causal_conv1d"]
        seen = []
        for r in rows:
            s = {k: r["shape"][k] for k in ("B", "C", "L", "W")}
            if s not in seen:
                seen.append(s)
        if len(seen) != 12:
            self.skipTest("the file's causal_conv1d rows are not a 12-shape draw")
        self.assertEqual(self.draws("causal_conv1d"), seen)


class HeadlineSubsets(unittest.TestCase):
    def test_default_shapes_mirror_the_grid(self):
        self.assertEqual(len(headline.default_shapes("attention")), 51)
        self.assertEqual(headline.default_shapes("causal_conv1d")[0], "B=8,C=4096,L=2048,W=4")
        self.assertEqual(len(headline.default_shapes("selective_scan")), 4)

    def test_subsets(self):
        for op in headline.OPS:
            n = len(headline.default_shapes(op))
            with self.subTest(op=op):
                a = headline.subset(op, None, 2026, n)
                self.assertEqual(a, headline.subset(op, None, 2026, n))
                self.assertEqual(len(a), min(n, headline.DEFAULT_COUNT[op]))
                self.assertEqual(len(set(a)), len(a))
                self.assertTrue(all(0 <= i < n for i in a))
        att = headline.subset("attention", 6, 2026, 51)
        groups = {min(i // 6, 8) for i in att}
        self.assertEqual(len(groups), 6, "attention's subset is not spread over its groups")
        self.assertEqual(len(headline.subset("attention", 12, 1, 51)), 12)


class HeadlineRows(unittest.TestCase):
    def test_clocks_of_the_two_winners(self):
        problem = {"variants": [{"variant": "a=1", "sm_clock_mhz": 1725},
                                {"variant": "a=2", "sm_clock_mhz": 1380},
                                {"variant": "a=3"}]}
        self.assertEqual(headline.clock_of(problem, "a=1"), 1725)
        self.assertIsNone(headline.clock_of(problem, "a=3"))
        self.assertIsNone(headline.clock_of(problem, "a=4"))
        row = {"op": "attention", "index": 35, "shape": "B=1", "default_us": 2629.9,
               "exhaustive_us": 2434.1, "ratio": 1.08, "within_2pct": False,
               "default_variant": "a=1", "exhaustive_variant": "a=2", "default_run_us": 2424.0,
               "default_s": 2.31, "default_measured": 6, "exhaustive_s": 174.8,
               "exhaustive_measured": 443, "default_mhz": 1725, "exhaustive_mhz": 1380}
        result = {"gpu": "H100", "commit": "c", "date": "d", "command": "x", "summary": {},
                  "rows": [row, dict(row, index=36, default_mhz=None, exhaustive_mhz=None)]}
        text = headline.markdown(result)
        self.assertIn("| `a=2` | 1725 / 1380 | 2424.0 |", text)
        self.assertIn("| `a=2` | - | 2424.0 |", text)  # rows from before the clocks


if __name__ == "__main__":
    unittest.main()
