"""horovod#3494: a worker removed gracefully (its slot no longer listed by discovery) leaves the
survivors below --min-np; they wait; a new worker comes. In Horovod the survivors skip the
state sync (a removal) while the new worker syncs (it is new): the two sides meet different
collectives and deadlock. In Perseus every rank of the new membership takes part in one
collective sync decision (perseus.common.elastic.sync), so the job goes on with every replica
equal and no commit lost.

The other two Horovod elastic bugs have their named tests too:
  - horovod#2652 (a new worker hangs on start-up, joining during a large broadcast):
    test_elastic_joining.py::test_horovod_2652_a_host_added_during_a_large_broadcast_joins;
  - horovod#3264 (every worker dies when one is lost while the next membership starts):
    test_elastic_local.py::test_horovod_3264_a_member_lost_while_the_next_membership_starts and
    test_elastic_joining.py::test_horovod_3264_a_new_worker_whose_first_membership_loses_a_...

Real processes under perseusrun's elastic mode with the chaos soak's TorchState worker
(bench/chaos/worker.py), bounded in time, then the reliability suite's leak check."""

import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[2] / "bench" / "chaos"))
from soak import check_records  # noqa: E402
from test_elastic_local import elastic_job, final  # noqa: E402,F401  (elastic_job: a fixture)
from test_elastic_random import write_hosts  # noqa: E402

pytestmark = pytest.mark.timeout(240)

CHAOS_WORKER = HERE.parents[2] / "bench" / "chaos" / "worker.py"


def wait_for(cond, job, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        assert job.proc.poll() is None, "perseusrun ended early\n" + job.output()
        time.sleep(0.1)
    job.stop_and_collect()
    raise AssertionError("%s within %d s\n%s" % (what, timeout, job.output()))


def test_horovod_3494_graceful_removal_below_min_np_then_a_new_worker(elastic_job, tmp_path):
    hosts = tmp_path / "hosts.txt"
    write_hosts(hosts, 3)
    job = elastic_job(["-np", "3", "--min-np", "3", "--max-np", "3",
                       "--host-discovery-script", "cat %s" % hosts], steps=200,
                      step_sleep=0.05, worker=CHAOS_WORKER, timeout=200,
                      worker_args=["--finish-file", tmp_path / "finish"])
    job.env["PERSEUS_START_TIMEOUT"] = "60"  # torch's import takes seconds on a busy machine
    job.start()
    job.wait_steps(3, 12)  # past two commits
    removed_pid = job.pid("localhost:2")
    write_hosts(hosts, 2)  # localhost:2 is stopped, not blacklisted: 2 workers < --min-np
    wait_for(lambda: not Path("/proc/%d" % removed_pid).exists(), job,
             "the removed worker did not stop")
    time.sleep(2)  # the survivors wait for a membership
    write_hosts(hosts, 3)  # a new worker on the listed slot again
    relisted = time.time()

    def new_worker_stepped():
        return any(r["event"] == "step" and r["time"] > relisted
                   for r in job.records().get("localhost:2", ()))
    wait_for(new_worker_stepped, job, "the new worker never completed a step (a deadlock)")
    code = job.wait().returncode
    assert code == 0, job.output()
    assert "--min-np is 3: waiting" in job.stderr, job.output()
    records = job.records()
    checks = check_records([r for recs in records.values() for r in recs])
    assert checks["divergent_count"] == 0, checks["divergent"]
    assert checks["lost_commit_count"] == 0, checks["lost_commits"]
    done = final(records)
    for w in ("localhost:0", "localhost:1", "localhost:2"):
        assert done[w] and done[w][0]["size"] == 3 and done[w][0]["step"] == 200, (w, done)
