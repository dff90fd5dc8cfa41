#!/usr/bin/env python3
"""Copies templates/attention/kernel.cuh with AT_PROBE(i) calls at the points bench/decode_probe.cu
traces (-DPROBE_TRACE): python3 bench/decode_probe_patch.py templates/attention/kernel.cuh OUT.cuh"""
import sys, re
src = open(sys.argv[1]).read()
def ins(anchor, text, after=True, count=1):
    global src
    assert src.count(anchor) >= 1, anchor
    i = src.index(anchor)
    if after:
        j = i + len(anchor)
        src = src[:j] + text + src[j:]
    else:
        src = src[:i] + text + src[i:]
src = "#ifndef AT_PROBE\n#define AT_PROBE(i)\n#endif\n" + src
ins("  extern __shared__ __align__(128) unsigned char smem_raw[];\n", "  AT_PROBE(0);\n")
ins("    seq_k = cache_len + args.seq_new;\n", "    AT_PROBE(1);\n")
ins("    if (k_q_in_regs && it == 0) {", "    if (it == 0) { AT_PROBE(2); }\n", after=False)
ins("  cp_async_wait<0>(); // nothing may still write", "  AT_PROBE(3);\n", after=False)
ins("  if (*flag_smem == 0u) {\n    return;", "  AT_PROBE(4);\n", after=False)
ins("                          q_row0);\n", "    AT_PROBE(5);\n")
open(sys.argv[2], "w").write(src)
