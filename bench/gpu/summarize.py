"""Turns the device check's log into the summary table (markdown): the TEST/MEMCHECK/STEP lines
that scripts/device_check.sh writes, the C++ tests' GPUBW/GPUSTAGED/GPUNCCL/GPUCAPI/GPUWATCHDOG
lines, and the `RESULT <step> k=v ...` lines of the timing scripts (perseusrun prefixes them with `[rank]<stdout>:`, stripped here).

Usage: summarize.py LOG > summary.md"""

import re
import sys


def main():
    steps, results, figures = [], [], []
    for line in open(sys.argv[1], errors="replace"):
        line = line.rstrip("\n")
        if line.startswith(("STEP ", "TEST ", "MEMCHECK ")):
            steps.append(line)
        if re.match(r"GPU(BW|STAGED|NCCL|CAPI|WATCHDOG) ", line):
            figures.append(line)
        m = re.search(r"RESULT (\S+) (.*)$", line)
        if m:
            kv = dict(f.split("=", 1) for f in m.group(2).split() if "=" in f)
            results.append((m.group(1), kv))
    print("# Perseus device check: summary\n")
    print("## Steps\n")
    print("| line |\n| --- |")
    for s in steps:
        print("| %s |" % s.replace("|", "/"))
    by_step = {}
    for step, kv in results:
        by_step.setdefault(step, []).append(kv)
    for step, rows in by_step.items():
        keys = []
        for kv in rows:
            keys += [k for k in kv if k not in keys]
        print("\n## %s\n" % step)
        print("| " + " | ".join(keys) + " |")
        print("|" + " --- |" * len(keys))
        for kv in rows:
            print("| " + " | ".join(kv.get(k, "") for k in keys) + " |")
    if figures:
        print("\n## C++ test figures\n\n```")
        print("\n".join(figures))
        print("```")
    if not results:
        print("\n(no RESULT lines: see device_check.log)")


if __name__ == "__main__":
    main()
