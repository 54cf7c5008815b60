#!/usr/bin/env python3
"""Fails when a function of the given binary uses ymm/zmm registers outside mwstrat's ISA passes.

The binary is built without -march (the asan stage), so its own code is SSE2: only the passes compiled under
`#pragma GCC target` (namespaces mwstrat::isa_avx2 / mwstrat::isa_avx512, nn/detail/kernel_isas.hpp) may use the
wider registers. A function of another namespace that does was compiled inside a target region by mistake and
would fault on a CPU without that ISA. Functions whose names mention a pass (template instances over a pass's
lambdas and types) are that pass's. Functions that carry their own target attribute and are chosen by cpuid
elsewhere (ALLOWED) are theirs.
"""
import re
import subprocess
import sys

# Runtime-dispatched by their own headers: checkpoint/crc32c.hpp's VPCLMULQDQ CRC32C (chosen by
# __builtin_cpu_supports, with __attribute__((target)) on each function).
ALLOWED = re.compile(r"^mwstrat::detail::crc32c_")

binary = sys.argv[1]
dump = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", binary], capture_output=True, text=True,
                      check=True).stdout
current, offenders, passes = None, {}, 0
for line in dump.splitlines():
    m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
    if m:
        current = m.group(1)
        continue
    if current is None or ("%ymm" not in line and "%zmm" not in line):
        continue
    if "isa_avx2" in current or "isa_avx512" in current:
        passes += 1
        continue
    if ALLOWED.match(current):
        continue
    offenders.setdefault(current, line.strip())
if offenders:
    for name, insn in list(offenders.items())[:20]:
        print(f"outside the ISA passes: {name}: {insn}")
    print(f"{len(offenders)} functions use ymm/zmm registers outside mwstrat::isa_avx2/isa_avx512")
    sys.exit(1)
if passes == 0:
    print("no ymm/zmm instruction at all: the passes are missing (is MWSTRAT_KERNEL_DISPATCH off?)")
    sys.exit(1)
print(f"{passes} wide-register instructions, all in the ISA passes")
