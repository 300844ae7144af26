"""Elastic mode across hosts (tests/python/multihost/netns_hosts.py: network namespaces with a
real sshd each, perseusrun in the controller's namespace): a whole host is killed and its link
cut, the job goes on with the other host, and when the host comes back (link up, blacklist
cooldown over) the discovery script's listing brings it back into the job."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "reliability"))
sys.path.insert(0, str(HERE.parent / "multihost"))
import relsupport  # noqa: E402
from test_elastic_local import ElasticJob, final  # noqa: E402

netns_hosts = pytest.importorskip("netns_hosts")
pytestmark = [pytest.mark.timeout(240),
              pytest.mark.skipif(not netns_hosts.available(),
                                 reason="needs root, network namespaces (ip netns) and sshd")]


@pytest.fixture(scope="module")
def cluster():
    with netns_hosts.VirtualCluster(["h1", "h2"]) as c:
        yield c


class ClusterJob(ElasticJob):
    def __init__(self, tmp_path, cluster, flags, **kw):
        super().__init__(tmp_path, list(cluster.perseusrun_args()) + flags, **kw)
        os.chmod(self.results, 0o777)
        self.cmd = ["ip", "netns", "exec", cluster.names[cluster.controller]] + self.cmd


def test_host_killed_and_cut_off_then_back_through_discovery(tmp_path, cluster):
    h1, h2 = cluster.address("h1"), cluster.address("h2")
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("%s:2\n%s:2\n" % (h1, h2))
    job = ClusterJob(tmp_path, cluster,
                     ["-np", "4", "--min-np", "2", "--blacklist-cooldown-range", "2", "3",
                      "--host-discovery-script", "cat %s" % hosts], steps=150,
                     step_sleep=0.1, timeout=200)
    try:
        job.start()
        job.wait_steps(4, 10)
        for slot in (0, 1):
            os.kill(job.pid("%s:%d" % (h2, slot)), signal.SIGKILL)
        cluster.link("h2", up=False)
        cut = time.time()
        job.wait_steps(2, 40, timeout=90)  # h1 alone goes on
        cluster.link("h2", up=True)
        code = job.wait().returncode
        assert code == 0, job.output()
        assert "host %s blacklisted for" % h2 in job.stderr, job.output()
        records = job.records()
        done = final(records)
        on_h1 = ["%s:0" % h1, "%s:1" % h1]
        for w in on_h1:
            assert done[w] and done[w][0]["size"] == 4 and done[w][0]["step"] == 150, (w, done)
            assert done[w][0]["rank"] == on_h1.index(w)
        back = [w for w in done if w.startswith(h2) and done[w]]
        assert len(back) == 2, done  # two new workers on h2 (slots 2 and 3 or 0 and 1 again)
        shrunk = [r for r in records["%s:0" % h1] if r["event"] == "joined" and r["size"] == 2]
        assert shrunk and shrunk[0]["time"] - cut < 30, shrunk
        job.finish()
    finally:
        cluster.link("h2", up=True)
        relsupport.kill_tagged(job.tag)
