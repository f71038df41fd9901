"""What IREE 3.13's CPU code does per multiply-add in a product, read from the assembly it writes: no timing, so no
noise. Each module in tests/bench/reproducers is compiled for the named CPUs (plain `iree-compile`, no tuning spec;
`--data-tiling` adds IREE's data tiling and microkernels), and for every dispatch the census counts, in its longest
basic block (the inner loop), the instructions, the multiply-adds (f32 FMAs, integer dot products, 32-bit integer
multiplies) and the stack accesses (register spills); and in the whole function the integer dot products and
32-bit multiplies (a microkernel's loop may not be the longest block).

    python tests/bench/isa_census.py [--cpus haswell,znver4] [--data-tiling] [MODULE.mlir ...]

One JSON line per (module, CPU, dispatch). docs/benchmarks/2026-12-07.md reads these for the 4-bit products.
"""
import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPRODUCERS = ROOT / "tests/bench/reproducers"
FMA = re.compile(r"^vfn?madd")
DOT = {"vpdpbusd", "vpdpbusds", "vpdpwssd", "vpdpwssds", "vpmaddubsw", "vpmaddwd"}


def compile_asm(mlir, cpu, data_tiling, work):
    dump = work / f"{mlir.stem}-{cpu}"
    flags = ["--iree-opt-data-tiling=true", "--iree-llvmcpu-enable-ukernels=all"] if data_tiling else []
    done = subprocess.run([ROOT / ".venv/bin/iree-compile", mlir, "--iree-input-type=stablehlo",
                           "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                           f"--iree-llvmcpu-target-cpu={cpu}", *flags,
                           f"--iree-hal-dump-executable-intermediates-to={dump}", "-o", work / "m.vmfb"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"isa_census: iree-compile of {mlir} for {cpu} failed:\n{done.stderr[-2000:]}")
    return "\n".join(p.read_text() for p in sorted(dump.glob("*.s")))


def census(asm):
    """Per dispatch function: the longest basic block's instruction mix."""
    for func in re.split(r"\n(?=[A-Za-z_][\w$.]*:\s*\n)", asm):
        name = func.split(":", 1)[0]
        if (not re.fullmatch(r"[A-Za-z_][\w$.]*", name) or "_dispatch_" not in name
                or name.startswith("iree_hal_executable_library_query")):
            continue
        blocks = re.split(r"\n(?=\.LBB\d+_\d+:)", func)
        ops = []
        for block in blocks:
            lines = [ln.strip() for ln in block.splitlines()]
            body = [ln for ln in lines if ln and not ln.startswith(("#", ".")) and not ln.endswith(":")]
            if len(body) > len(ops):
                ops = body
        mnemonics = collections.Counter(ln.split()[0] for ln in ops)
        everywhere = collections.Counter(ln.split()[0] for ln in (s.strip() for s in func.splitlines())
                                         if ln and not ln.startswith(("#", ".")) and not ln.endswith(":"))
        fma = sum(n for m, n in mnemonics.items() if FMA.match(m))
        yield {"dispatch": name, "inner_block_instructions": len(ops), "f32_fma": fma,
               "int_dot_product": sum(mnemonics[m] for m in DOT), "i32_multiply": mnemonics["vpmulld"],
               "stack_accesses": sum("(%rsp)" in ln for ln in ops),
               "function_int_dot_products": sum(everywhere[m] for m in DOT),
               "function_i32_multiplies": everywhere["vpmulld"], "top": mnemonics.most_common(6)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("modules", nargs="*", type=Path)
    ap.add_argument("--cpus", default="haswell,znver4", help="LLVM CPU names: haswell is AVX2 + FMA + F16C, znver4 AVX-512")
    ap.add_argument("--data-tiling", action="store_true")
    a = ap.parse_args()
    modules = a.modules or sorted(REPRODUCERS.glob("*.mlir"))
    with tempfile.TemporaryDirectory() as work:
        for mlir in modules:
            for cpu in a.cpus.split(","):
                for row in census(compile_asm(mlir, cpu, a.data_tiling, Path(work))):
                    print(json.dumps({"module": mlir.name, "cpu": cpu, "data_tiling": a.data_tiling, **row}), flush=True)


if __name__ == "__main__":
    main()
