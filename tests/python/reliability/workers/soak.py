"""Soak: a bounded stream of random collectives, every result checked.

Op i is drawn from Random(seed, i), identically on every rank: kind (allreduce with each
reduction, broadcast, allgather, alltoall, reducescatter), dtype, size (empty to 1M
elements), process set (global or one of two registered subsets) and root. Inputs are small
integers derived from (i, rank), so every rank can compute every expected output exactly.
Ops are submitted in batches, each rank in its own shuffled order, then waited for.

Records the process's RSS, malloc's live bytes, open fds and mapped /dev/shm segments after a
warm-up, at every tenth of the remaining ops and at the end (usage()), for the test to check
that they stay flat: a leak shows as growth across the samples, allocator noise as a step that
does not repeat. Each sample first calls gc.collect() and malloc_trim(0), so that `rss`
measures live memory rather than free heap pages that glibc keeps resident; `rss_raw` is the
resident set before the trim, kept for comparison."""

import ctypes
import gc
import os
import random
import sys
import time

import numpy as np

import relcommon as rc

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8, np.float16]
SIZES = [0, 1, 7, 100, 1000, 4096, 30000, 100000, 1 << 20]
SIZE_WEIGHTS = [1, 6, 6, 6, 6, 4, 3, 2, 1]
SUM, AVERAGE, MIN, MAX, PRODUCT = 0, 1, 2, 3, 4
KINDS = ["allreduce", "allreduce", "broadcast", "allgather", "alltoall", "reducescatter"]


def add_args(p):
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch", type=int, default=8)
    # The test's own check: malloc this many bytes per op and never free them (a known leak
    # that the flatness criteria must catch).
    p.add_argument("--leak-bytes", type=int, default=0)


_LIBC = ctypes.CDLL(None)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]


_LIBC.mallinfo2.restype = _MallInfo2
_LIBC.malloc.restype = ctypes.c_void_p


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def usage():
    """One sample. `rss_raw` is the resident set as found; `rss` is the resident set after
    malloc_trim(0), which hands glibc's free heap pages back to the kernel, so that it counts
    live memory rather than what the allocator keeps cached (glibc's dynamic mmap threshold
    lets freed 8 MB arrays come back from the heap, whose free pages stay resident). `heap`
    is the bytes malloc has handed out and not got back (every arena plus mmapped chunks):
    the C++ core's maps and numpy's data. `py_blocks` counts live Python objects' blocks."""
    gc.collect()
    raw = rss_bytes()
    _LIBC.malloc_trim(0)
    mi = _LIBC.mallinfo2()
    fds = len(os.listdir("/proc/self/fd"))
    with open("/proc/self/maps") as f:
        shm = len({line.split()[-1] for line in f if "/dev/shm/perseus-" in line})
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f)
    kib = {k: int(status[k].split()[0]) << 10 for k in ("RssAnon", "RssShmem")}
    return {"rss": rss_bytes(), "rss_raw": raw, "rss_anon": kib["RssAnon"],
            "rss_shmem": kib["RssShmem"], "heap": mi.uordblks + mi.hblkhd,
            "py_blocks": sys.getallocatedblocks(), "fds": fds, "shm_maps": shm}


def values(i, r, n, dtype, low=1, span=4):
    return ((np.arange(n, dtype=np.int64) + 3 * i + 5 * r) % span + low).astype(dtype)


class Spec:
    """Everything about op i that every rank must agree on."""

    def __init__(self, seed, i, sets):
        rnd = random.Random(seed * 1000003 + i)
        self.i = i
        self.kind = rnd.choice(KINDS)
        self.dtype = rnd.choice(DTYPES)
        self.n = rnd.choices(SIZES, SIZE_WEIGHTS)[0]
        self.set_id, self.members = rnd.choice(sets)
        self.root = rnd.randrange(len(self.members))
        ops = [SUM, MIN, MAX, PRODUCT] + ([AVERAGE] if np.dtype(self.dtype).kind == "f" else [])
        self.op = rnd.choice(ops)
        # alltoall/allgather rows per set rank, and per pair for alltoall
        self.rows = [rnd.randrange(3) for _ in self.members]
        self.splits = [[rnd.randrange(3) for _ in self.members] for _ in self.members]
        self.name = "soak.%d" % i


def submit(core, spec, me):
    """Starts op `spec` for set rank `me`; returns (handle, check) where check(handle) raises
    on a wrong result."""
    k = len(spec.members)
    r = spec.members[me]
    n, dt = spec.n, spec.dtype
    ps = spec.set_id
    if spec.kind == "allreduce":
        low, span = (1, 2) if spec.op == PRODUCT else (1, 4)
        inputs = [values(spec.i, q, n, np.int64, low, span) for q in spec.members]
        a = inputs[me].astype(dt)
        if spec.op in (SUM, AVERAGE):
            expect = sum(inputs).astype(np.float64)
            if spec.op == AVERAGE:
                expect = expect / k
        elif spec.op == PRODUCT:
            expect = np.prod(inputs, axis=0).astype(np.float64)
        else:
            expect = (np.min if spec.op == MIN else np.max)(inputs, axis=0).astype(np.float64)
        h = core.allreduce(spec.name, a, None, spec.op, 1.0, 1.0, ps)
        tol = 1e-2 if dt == np.float16 else 1e-6
        return h, lambda h: _close(spec, a, expect.astype(dt), tol)
    if spec.kind == "broadcast":
        a = values(spec.i, r, n, dt)
        expect = values(spec.i, spec.members[spec.root], n, dt)
        h = core.broadcast(spec.name, a, None, spec.root, ps)
        return h, lambda h: _equal(spec, a, expect)
    if spec.kind == "allgather":
        a = np.full((spec.rows[me], 2), (spec.i + r) % 100, dtype=dt)
        expect = np.concatenate([np.full((spec.rows[q], 2), (spec.i + spec.members[q]) % 100,
                                         dtype=dt) for q in range(k)])
        h = core.allgather(spec.name, a, ps)
        return h, lambda h: _equal(spec, h.output(0), expect)
    if spec.kind == "alltoall":
        send = spec.splits[me]
        a = np.concatenate([np.full((send[d], 3), (7 * r + spec.members[d] + spec.i) % 100,
                                    dtype=dt) for d in range(k)])
        expect = np.concatenate([np.full((spec.splits[s][me], 3),
                                         (7 * spec.members[s] + r + spec.i) % 100, dtype=dt)
                                 for s in range(k)])
        h = core.alltoall(spec.name, a, np.array(send, dtype=np.int64), ps)

        def check(h):
            _equal(spec, h.output(0), expect)
            got = list(h.received_splits())
            if got != [spec.splits[s][me] for s in range(k)]:
                raise AssertionError("%s: received splits %s" % (spec.name, got))
        return h, check
    # reducescatter (SUM): set rank j gets block j; the first n % k ranks get one more row.
    inputs = [values(spec.i, q, n, np.int64) for q in spec.members]
    a = inputs[me].astype(dt)
    total = sum(inputs).astype(dt)
    counts = [n // k + (1 if j < n % k else 0) for j in range(k)]
    start = sum(counts[:me])
    h = core.reducescatter(spec.name, a, SUM, 1.0, 1.0, ps)
    return h, lambda h: _equal(spec, h.output(0), total[start:start + counts[me]])


def _equal(spec, got, expect):
    got = np.asarray(got).reshape(np.asarray(expect).shape)
    if not np.array_equal(got, expect):
        raise AssertionError("%s (%s %s n=%d set=%d): wrong result %s, expected %s"
                             % (spec.name, spec.kind, np.dtype(spec.dtype).name, spec.n,
                                spec.set_id, got.ravel()[:6], np.asarray(expect).ravel()[:6]))


def _close(spec, got, expect, tol):
    if not np.allclose(got.astype(np.float64), expect.astype(np.float64), rtol=tol, atol=tol):
        _equal(spec, got, expect)


def high_water(core, sets):
    """Runs the stream's largest op of each reducing kind (1M float64 elements) on every set,
    checked: the communicators' scratch buffers grow (never shrink, by design) to what the
    stream will ever need here, before the first sample, so that the samples see only what
    the ops leave behind."""
    n = SIZES[-1]
    for set_id, members in sets:
        if rc.RANK not in members:
            continue
        k, me = len(members), members.index(rc.RANK)
        ar, bc, rs = (np.full(n, rc.RANK + 1.0) for _ in range(3))
        hs = [core.allreduce("soak.hw.ar.%d" % set_id, ar, None, SUM, 1.0, 1.0, set_id),
              core.broadcast("soak.hw.bc.%d" % set_id, bc, None, 0, set_id),
              core.reducescatter("soak.hw.rs.%d" % set_id, rs, SUM, 1.0, 1.0, set_id)]
        for h in hs:
            h.wait()
        total = float(sum(m + 1 for m in members))
        rows = n // k + (1 if me < n % k else 0)
        if not (np.all(ar == total) and np.all(bc == members[0] + 1.0)
                and np.array_equal(hs[2].output(0), np.full(rows, total))):
            raise AssertionError("set %d: wrong result of a high-water op" % set_id)


def run_batch(core, args, sets, order, first):
    """Ops [first, first + batch): this rank's share submitted in its own order, then each
    waited for and checked. A function, so that the batch's arrays and handles are gone
    before the next sample."""
    specs = [Spec(args.seed, i, sets) for i in range(first, min(args.ops, first + args.batch))]
    mine = [s for s in specs if rc.RANK in s.members]
    order.shuffle(mine)
    pending = [(s,) + submit(core, s, s.members.index(rc.RANK)) for s in mine]
    for spec, handle, check in pending:
        handle.wait()
        check(handle)
    if args.leak_bytes:
        for _ in specs:
            _LIBC.malloc(args.leak_bytes)


def main():
    args = rc.parse(add_args)
    res = rc.Results(args.results)
    from perseus import _core as core
    core.init()
    topo = core.topology()
    res.report(outcome="topology", topology=topo)
    size = topo["size"]
    sets = [(0, list(range(size)))]
    for ranks in ([0, size - 1], list(range(1, size))):
        if 2 <= len(ranks) < size:
            sets.append((core.add_process_set(ranks), ranks))
    high_water(core, sets)
    order = random.Random(args.seed * 7919 + rc.RANK)
    warm = max(args.batch, args.ops // 10)
    sample_every = max(args.batch, (args.ops - warm) // 10)
    samples = []
    t0 = time.time()
    for first in range(0, args.ops, args.batch):
        if first >= warm + len(samples) * sample_every:
            samples.append(dict(usage(), ops=first))
        run_batch(core, args, sets, order, first)
    end_usage = usage()
    res.report(outcome="ok", ops=args.ops, seconds=time.time() - t0,
               start=samples[0] if samples else end_usage, end=end_usage,
               samples=samples + [dict(end_usage, ops=args.ops)])
    # shutdown() on one rank stops the job's engine everywhere (as in Horovod): a rank outside
    # the last ops' process sets must not leave while the others still run them.
    core.barrier().wait()
    core.shutdown()


if __name__ == "__main__":
    main()
