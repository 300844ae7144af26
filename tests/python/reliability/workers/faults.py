"""Per-rank code of the fault tests (tests/python/reliability/test_faults*.py), on the C API
binding (perseus._core + numpy) so that ranks start fast.

--mode kill --phase P --victim V: rank V SIGKILLs itself at a random moment of phase P:
    start (during init/rendezvous), negotiation (the others wait for a tensor V never submits),
    allreduce / broadcast / allgather (inside a stream of large transfers), posted_broadcast /
    posted_allgather (64 KiB per rank of one name, posted by address after its second run: the
    victim may die before it read a survivor's buffer).
  Every other rank records the error it gets and when.
--mode loop: large allreduces (checked) until --seconds pass; after the second one each rank
  marks "progress.<rank>" (the link-cut test cuts the link then). Errors are recorded.
--mode stall --victim V --stall-s S: rank V does not submit "grad.stuck" for S seconds
  (stuck in user code); the others wait for it.
--mode slow: --iters checked collectives of mixed sizes (a shaped link must not change results).
"""

import os
import random
import sys
import time

import numpy as np

import relcommon as rc

LARGE = 4 << 20  # float32 elements: 16 MiB per rank and transfer
LENT = 16 << 10  # float32 elements: 64 KiB per rank, posted by address


def add_args(p):
    p.add_argument("--mode", required=True)
    p.add_argument("--phase", default="allreduce")
    p.add_argument("--victim", type=int, default=-1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--stall-s", type=float, default=4)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--elements", type=int, default=LARGE)
    p.add_argument("--dump-secret", action="store_true",
                   help="rank 0 writes PERSEUS_SECRET to results/secret (hostile-peer test)")


def allreduce_checked(core, name, n):
    a = np.full(n, rc.RANK + 1, dtype=np.float32)
    core.allreduce(name, a, None, 0).wait()  # 0: SUM, in place
    total = rc.SIZE * (rc.SIZE + 1) / 2
    if a[0] != total or a[-1] != total or not np.all(a == total):
        raise AssertionError("%s: wrong sum %s, expected %s" % (name, a[:4], total))


def time_is_up(core, deadline, i):
    """Whether any rank's deadline passed, agreed by all: each rank deciding alone would leave
    one rank in an extra collective that the others never submit (a genuine stall)."""
    flag = np.array([1.0 if time.time() >= deadline else 0.0], dtype=np.float32)
    core.allreduce("stop.%d" % i, flag, None, 3).wait()  # 3: MAX
    return flag[0] > 0


def broadcast_checked(core, name, n, root):
    a = np.full(n, rc.RANK, dtype=np.float32)
    core.broadcast(name, a, None, root).wait()
    if a[0] != root or a[-1] != root:
        raise AssertionError("%s: broadcast gave %s, expected %d" % (name, a[:4], root))


def allgather_checked(core, name, n):
    a = np.full(n // rc.SIZE, rc.RANK, dtype=np.float32)
    h = core.allgather(name, a)
    h.wait()
    out = h.output(0)
    if out.shape[0] != a.shape[0] * rc.SIZE or out[-1] != rc.SIZE - 1:
        raise AssertionError("%s: allgather gave shape %s" % (name, out.shape))


def kill_mode(core, args, res):
    rnd = random.Random(args.seed)
    victim = rc.RANK == args.victim
    if args.phase == "start":
        if victim:
            rc.kill_self_later(res, rnd.uniform(0.0, 0.5))
        core.init()
        for i in range(100000):
            allreduce_checked(core, "start.%d" % i, 1024)
        return
    core.init()
    res.report(outcome="initialized")
    for i in range(3):
        allreduce_checked(core, "warm.%d" % i, 1024)
    if args.phase == "negotiation":
        if victim:
            rc.kill_self_later(res, rnd.uniform(0.0, 0.3))
            time.sleep(60)
        allreduce_checked(core, "neg.never_submitted_by_%d" % args.victim, 1024)
        return
    if victim:
        rc.kill_self_later(res, rnd.uniform(0.05, 0.6))
    step = {"allreduce": lambda i: allreduce_checked(core, "big.%d" % i, args.elements),
            "broadcast": lambda i: broadcast_checked(core, "bc.%d" % i, args.elements,
                                                     (args.victim + 1) % rc.SIZE),
            "allgather": lambda i: allgather_checked(core, "ag.%d" % i, args.elements),
            "posted_broadcast": lambda i: [
                broadcast_checked(core, "bc.lent", LENT, (args.victim + 1) % rc.SIZE)
                for _ in range(20)],
            "posted_allgather": lambda i: [
                allgather_checked(core, "ag.lent", LENT * rc.SIZE) for _ in range(20)]}[args.phase]
    deadline = time.time() + args.seconds
    i = 0
    while not time_is_up(core, deadline, i):
        step(i)
        i += 1


def loop_mode(core, args, res):
    core.init()
    if args.dump_secret and rc.RANK == 0:
        with open(os.path.join(args.results, "secret"), "w") as f:
            f.write(os.environ["PERSEUS_SECRET"])
    deadline = time.time() + args.seconds
    i = 0
    while not time_is_up(core, deadline, i):
        allreduce_checked(core, "loop.%d" % i, args.elements)
        i += 1
        if i == 2:
            res.mark("progress.%d" % rc.RANK)
    res.report(outcome="iterations", count=i)


def stall_mode(core, args, res):
    core.init()
    allreduce_checked(core, "before.stall", 16)
    if rc.RANK == args.victim:
        res.mark("stuck")
        time.sleep(args.stall_s)  # "user code" that does not reach the next collective
    allreduce_checked(core, "grad.stuck", 16)
    allreduce_checked(core, "after.stall", 16)


def slow_mode(core, args, res):
    core.init()
    rnd = random.Random(args.seed)
    t0 = time.time()
    for i in range(args.iters):
        n = rnd.choice([1, 1000, 100000, 1 << 20])
        allreduce_checked(core, "slow.ar.%d" % i, n)
        broadcast_checked(core, "slow.bc.%d" % i, n, i % rc.SIZE)
        allgather_checked(core, "slow.ag.%d" % i, max(n, rc.SIZE))
    res.report(outcome="timing", seconds=time.time() - t0)


def main():
    args = rc.parse(add_args)
    res = rc.Results(args.results)
    rc.hold_sigterm()
    from perseus import _core
    started = time.time()
    try:
        {"kill": kill_mode, "loop": loop_mode, "stall": stall_mode,
         "slow": slow_mode}[args.mode](_core, args, res)
    except Exception as e:  # noqa: BLE001 (every error is the result under test)
        res.raised(e, elapsed=time.time() - started)
        print("rank %d raised %s: %s" % (rc.RANK, type(e).__name__, e), file=sys.stderr,
              flush=True)
        sys.exit(3)
    res.report(outcome="ok", elapsed=time.time() - started)
    _core.barrier().wait()  # shutdown() on one rank ends the job's engine on all of them
    _core.shutdown()


if __name__ == "__main__":
    main()
