"""Symbolizes what bench/probes/sampler.c wrote and prints where the samples fell.

    python3 bench/probes/sampler_report.py PREFIX [--top 40] [--only SUBSTRING]

PREFIX is the sampler's SAMPLER_OUT: of the files PREFIX.<pid> it reads the one of the process
that used the most CPU time, the one that did the work.
Two tables: self (the function a sample interrupted) and inclusive (the functions anywhere on
its stack, each counted once per sample). --only keeps the samples whose stack has a function
whose name contains SUBSTRING (for example the benchmark's loop), so that set-up is left out.
Needs addr2line (binutils)."""
import argparse
import bisect
import collections
import glob
import subprocess


def read(path):
    stacks, maps = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("s "):
                stacks.append([int(a, 16) for a in line.split()[1:]])
            elif line.startswith("m "):
                parts = line[2:].split(None, 5)
                if len(parts) < 6 or "x" not in parts[1]:
                    continue
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                maps.append((lo, hi, int(parts[2], 16), parts[5].strip()))
    maps.sort()
    return stacks, maps


def symbolize(stacks, maps):
    starts = [m[0] for m in maps]
    wanted = collections.defaultdict(set)  # module -> file addresses
    where = {}
    for stack in stacks:
        for depth, pc in enumerate(stack):
            # A return address points after the call: look up the call itself.
            key = (pc, depth > 0)
            if key in where:
                continue
            i = bisect.bisect_right(starts, pc) - 1
            if i < 0 or pc >= maps[i][1] or not maps[i][3].startswith("/"):
                where[key] = None
                continue
            lo, _, off, path = maps[i]
            addr = pc - lo + off - (1 if depth > 0 else 0)
            where[key] = (path, addr)
            wanted[path].add(addr)
    names = {}
    for path, addrs in wanted.items():
        addrs = sorted(addrs)
        try:
            out = subprocess.run(["addr2line", "-f", "-C", "-e", path] + [hex(a) for a in addrs],
                                 capture_output=True, text=True, check=True).stdout.splitlines()
        except (OSError, subprocess.CalledProcessError):
            out = []
        base = path.rsplit("/", 1)[-1]
        for k, a in enumerate(addrs):
            fn = out[2 * k] if 2 * k < len(out) else "??"
            names[(path, a)] = f"{fn if fn != '??' else hex(a)} [{base}]"
    return [[names.get(where[(pc, d > 0)], "??") if where[(pc, d > 0)] else "??"
             for d, pc in enumerate(stack)] for stack in stacks]


def busiest(prefix):
    def cpu_s(path):
        with open(path) as f:
            return float(f.readline().split()[3])
    files = glob.glob(glob.escape(prefix) + ".*")
    if not files:
        raise SystemExit("no profile %s.<pid>" % prefix)
    return max(files, key=cpu_s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile", help="SAMPLER_OUT of the run")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    path = busiest(args.profile)
    stacks, maps = read(path)
    named = symbolize(stacks, maps)
    if args.only:
        named = [s for s in named if any(args.only in f for f in s)]
    total = len(named)
    print(f"{path}: {total} samples" + (f" with '{args.only}' on the stack" if args.only else ""))
    if not total:
        return
    own = collections.Counter(s[0] for s in named)
    incl = collections.Counter(f for s in named for f in set(s))
    for title, counts in (("self", own), ("inclusive", incl)):
        print(f"\n== {title}")
        for fn, n in counts.most_common(args.top):
            print(f"{100.0 * n / total:6.1f}%  {fn[:160]}")


if __name__ == "__main__":
    main()
