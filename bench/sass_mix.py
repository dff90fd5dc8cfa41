#!/usr/bin/env python3
"""The SASS of one variant, counted on the development machine (no GPU): registers and
spills from ptxas, and the instructions per opcode of the whole kernel and of its longest
loop (the largest backward branch), as bench/notes/attention-hopper.md and
selective_scan-small-batch.md read them. Static counts: a loop's body once, every branch
of it; what runs how often is Nsight Compute's to say on the GPU machine.

  python3 bench/sass_mix.py attention "B=32,Hq=16,Hkv=16,Sq=512,Sk=512,D=128,causal=0,dtype=bf16" \\
      "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma_persistent"

Needs build/tests/autotune_ptx (the project's build), ptxas ($CUDA_HOME/bin) and nvdisasm,
which the CUDA toolkit's Debian install here lacks: --nvdisasm PATH or $NVDISASM, e.g. from
PyPI: `pip download --no-deps nvidia-cuda-nvdisasm && unzip nvidia_cuda_nvdisasm-*.whl`
(nvidia/cu13/bin/nvdisasm). With --old-templates DIR the same variant is also built from the
templates there (AUTOTUNE_TEMPLATE_DIR) and the counts are shown side by side.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def build(args, templates, tmp, tag):
    """(ptxas -v report, SASS text) of the variant, from `templates` (None: the embedded)."""
    env = dict(os.environ)
    env.pop("AUTOTUNE_TEMPLATE_DIR", None)
    if templates:
        env["AUTOTUNE_TEMPLATE_DIR"] = templates
    ptx = os.path.join(tmp, tag + ".ptx")
    cubin = os.path.join(tmp, tag + ".cubin")
    with open(ptx, "w") as out:
        run = subprocess.run([args.ptx_tool, args.op, args.arch, args.shape, args.config],
                             env=env, stdout=out, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        raise SystemExit(f"sass_mix: {args.ptx_tool} failed:\n{run.stderr}")
    ptxas = subprocess.run([args.ptxas, f"-arch={args.arch}", "-v", ptx, "-o", cubin],
                           capture_output=True, text=True)
    if ptxas.returncode != 0:
        raise SystemExit(f"sass_mix: ptxas failed:\n{ptxas.stderr}")
    sass = subprocess.run([args.nvdisasm, "-c", cubin], capture_output=True, text=True)
    if sass.returncode != 0:
        raise SystemExit(f"sass_mix: nvdisasm failed:\n{sass.stderr}")
    return ptxas.stderr, sass.stdout


INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)(\.[A-Z0-9_.]+)?")


def opcode(match):
    """The opcode a row counts under: the base name, with the variant that tells apart what
    costs differently (MUFU's function, memory ops' widths, IMAD's register moves)."""
    base, suffix = match.group(2), match.group(3) or ""
    if base == "MUFU" or base in ("LDS", "STS", "LDG", "STG", "LDGSTS"):
        return base + suffix
    if base == "IMAD" and suffix.startswith(".MOV"):
        return "IMAD.MOV"
    return base


def counts(sass):
    """(whole kernel, longest loop) opcode counters of a SASS listing."""
    lines = sass.split("\n")
    labels = {}
    for i, line in enumerate(lines):
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = i
    loop = (0, len(lines) - 1)
    for i, line in enumerate(lines):
        m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            if i - labels[m.group(1)] > loop[1] - loop[0] or loop == (0, len(lines) - 1):
                loop = (labels[m.group(1)], i)
    whole, inner = collections.Counter(), collections.Counter()
    for i, line in enumerate(lines):
        m = INSTRUCTION.match(line)
        if m:
            whole[opcode(m)] += 1
            if loop[0] <= i <= loop[1]:
                inner[opcode(m)] += 1
    return whole, inner


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op")
    ap.add_argument("shape")
    ap.add_argument("config")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--ptx-tool", default=os.path.join(HERE, "..", "build", "tests", "autotune_ptx"))
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    ap.add_argument("--ptxas", default=shutil.which("ptxas") or os.path.join(cuda, "bin", "ptxas"))
    ap.add_argument("--nvdisasm", default=os.environ.get("NVDISASM") or shutil.which("nvdisasm"))
    ap.add_argument("--old-templates", help="also build from these templates, side by side")
    ap.add_argument("--top", type=int, default=30, help="opcodes shown (most frequent first)")
    args = ap.parse_args()
    for what, path in (("autotune_ptx", args.ptx_tool), ("ptxas", args.ptxas),
                       ("nvdisasm", args.nvdisasm)):
        if not path or not os.path.exists(path):
            raise SystemExit(f"sass_mix: {what} not found ({path}); see --help")
    builds = [("new", None)] + ([("old", args.old_templates)] if args.old_templates else [])
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tag, templates in builds:
            report, sass = build(args, templates, tmp, tag)
            for line in report.splitlines():
                if "registers" in line or "spill" in line or "C75" in line:
                    print(f"{tag}: {line.strip()}")
            results[tag] = counts(sass)
    for part, index in (("kernel", 0), ("longest loop", 1)):
        tags = [tag for tag, _ in builds]
        total = {tag: sum(results[tag][index].values()) for tag in tags}
        print(f"\n{part}: " + ", ".join(f"{tag} {total[tag]} instructions" for tag in tags))
        merged = collections.Counter()
        for tag in tags:
            merged.update(results[tag][index])
        for op, _ in merged.most_common(args.top):
            print(f"  {op:16} " + " ".join(f"{results[tag][index][op]:6}" for tag in tags))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
