"""What the elastic state workers share: the run decorator they use and the cross-rank check.

In a job perseusrun started in elastic mode, resets are elastic_worker.reset() (a new
membership epoch). At fixed membership the job's store cannot be joined twice, so the reset
only records that the loop asked for it, at the same point on every rank (a barrier): every
failure in these checks is one that every rank raised, with the core still up."""

from perseus.common.elastic import worker as elastic_worker

REAL_RESET = elastic_worker.enabled()


def elastic_runner(hvd):
    """(elastic_run, resets): the decorator for `hvd` (perseus.torch or perseus.mxnet), and
    the list of sizes at each injected reset (empty with real resets)."""
    resets = []

    def same_membership():
        resets.append(hvd.size())
        hvd.barrier()

    def elastic_run(func):
        if REAL_RESET:
            return hvd.elastic.run(func)
        return hvd.elastic.run_fn(func, same_membership)
    return elastic_run, resets


def everyone_equal(hvd, same, obj):
    """Whether every rank's `obj` equals rank 0's, by `same`."""
    gathered = hvd.allgather_object(obj)
    return all(same(g, gathered[0]) for g in gathered)


def run_checks(hvd, checks):
    """Runs each (name, check) in turn on every rank and prints 'PASS <name>' after it."""
    for name, check in checks:
        check()
        hvd.barrier()
        print("PASS %s" % name, flush=True)
    hvd.shutdown()
