"""Several hosts on one machine (tests/python/multihost/netns_hosts.py): network namespaces
joined by veth to a bridge, a real sshd in each, perseusrun started in the controller's
namespace with -H h1:2,h2:2 exactly as on a cluster. Proves the hierarchical (local/cross)
paths and the TCP transport, then the network faults: a rank SIGKILLed, a link cut mid-
transfer, a slow and lossy link, a host that is not there or refuses ssh."""

import time

import pytest

import relsupport as rs

netns_hosts = pytest.importorskip("netns_hosts")
pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(not netns_hosts.available(),
                                 reason="needs root, network namespaces (ip netns) and sshd")]
TIMEOUT_S = 10


@pytest.fixture(scope="module")
def cluster():
    with netns_hosts.VirtualCluster(["h1", "h2"]) as c:
        yield c


def job(tmp_path, cluster, worker, *args, slots=2, env=None, **kw):
    return rs.Job(tmp_path, worker, *args, np=2 * slots, hosts=cluster.hosts_arg(slots),
                  cluster=cluster, env=env or rs.job_env(PERSEUS_TIMEOUT=TIMEOUT_S), **kw)


@pytest.mark.parametrize("hierarchical", ["1", "0"])
def test_collectives_across_hosts(tmp_path, cluster, hierarchical):
    """Every collective on 2 hosts x 2 ranks: shared memory within a host, TCP across, with
    and without the hierarchical allreduce."""
    env = rs.job_env(PERSEUS_HIERARCHICAL_ALLREDUCE=hierarchical)
    j = job(tmp_path, cluster, "soak.py", "--ops", 150, "--seed", 7, env=env).run()
    assert j.returncode == 0, j.output()
    res = j.results_by_rank()
    hosts = {r: recs[-1]["host"] for r, recs in res.items()}
    assert hosts == {0: cluster.address("h1"), 1: cluster.address("h1"),
                     2: cluster.address("h2"), 3: cluster.address("h2")}, hosts
    topo = {r: recs[0]["topology"] for r, recs in res.items()}
    assert topo[3]["local_rank"] == 1 and topo[3]["cross_rank"] == 1, topo
    assert all(recs[-1]["outcome"] == "ok" for recs in res.values()), res
    j.assert_clean()


def test_process_sets_beyond_the_group_ids(tmp_path, cluster):
    """80 process sets created and removed (61 group ids): sets within one host and across
    hosts take over removed sets' group ids, whose arena history every host's ranks agree on
    first (Note [Reused group ids])."""
    j = job(tmp_path, cluster, "set_churn.py", "--sets", 80).run()
    assert j.returncode == 0, j.output()
    res = j.results_by_rank()
    assert all(recs[-1]["outcome"] == "ok" for recs in res.values()), res
    j.assert_clean()


@pytest.mark.parametrize("phase", ["negotiation", "allreduce"])
def test_sigkill_rank_on_remote_host(tmp_path, cluster, phase):
    victim = 3
    j = job(tmp_path, cluster, "faults.py", "--mode", "kill", "--phase", phase,
            "--victim", victim, "--seed", 11, "--elements", 1 << 20)
    try:
        j.run()
        assert j.returncode != 0, j.output()
        assert "rank 3 on host %s" % cluster.address("h2") in j.stderr, j.output()
        killed = j.marker("killed")
        assert killed and j.ended - killed < TIMEOUT_S + rs.TIMEOUT_MARGIN_S, j.output()
        # Survivors that raise do so in bounded time; one that would need longer than
        # perseusrun's 3 s SIGTERM->SIGKILL grace (e.g. it only learns of the loss through the
        # ranks that fail before it) is stopped by perseusrun instead.
        res = j.results_by_rank()
        raised = [r for rank in (0, 1, 2) for r in res.get(rank, []) if r["outcome"] == "raised"]
        assert raised, "no survivor raised\n" + j.output()
        for r in raised:
            assert "PerseusInternalError" in r["classes"], r
            assert r["time"] - killed < TIMEOUT_S + rs.TIMEOUT_MARGIN_S, r
            print("  rank %d: %s after %.2f s: %s" % (r["rank"], r["type"], r["time"] - killed,
                                                     r["message"][:160]))
        j.assert_clean()
    finally:
        rs.kill_tagged(j.tag)


def test_link_cut_mid_transfer(tmp_path, cluster):
    """h2's only link goes down while large allreduces run: every rank, on both sides of the
    cut, raises within PERSEUS_TIMEOUT + margin; perseusrun exits non-zero; once the link is
    back nothing of the job is left on either host."""
    j = job(tmp_path, cluster, "faults.py", "--mode", "loop", "--seconds", 90,
            "--elements", 1 << 20).start()
    try:
        assert j.wait_marker("progress.3", 90), j.wait().output()
        time.sleep(0.2)
        cut = time.time()
        cluster.link("h2", up=False)
        j.wait()
        assert j.returncode != 0, j.output()
        assert j.ended - cut < TIMEOUT_S + 2 * rs.TIMEOUT_MARGIN_S, j.output()
        # Ranks on h2 get no SIGTERM (perseusrun's ssh sessions to them are cut too): they
        # end on their own timeout.
        deadline = time.time() + TIMEOUT_S + 3 * rs.TIMEOUT_MARGIN_S
        while rs.tagged_pids(j.tag) and time.time() < deadline:
            time.sleep(0.2)
        res = j.results_by_rank()
        for rank in range(4):
            raised = [r for r in res.get(rank, []) if r["outcome"] == "raised"]
            if rank in (0, 1) and not raised:
                continue  # stopped by perseusrun after the first rank failed: fine
            assert raised, "rank %d never raised after the cut\n%s" % (rank, j.output())
            assert raised[0]["time"] - cut < TIMEOUT_S + 2 * rs.TIMEOUT_MARGIN_S, raised[0]
            assert "PerseusInternalError" in raised[0]["classes"], raised[0]
        print("  link cut: perseusrun ended %.2f s after the cut; %s" % (j.ended - cut, "; ".join(
            "rank %d %s after %.2f s" % (r, recs[-1].get("type", recs[-1]["outcome"]),
                                         recs[-1]["time"] - cut) for r, recs in sorted(res.items()))))
        cluster.link("h2", up=True)
        j.assert_clean(grace=TIMEOUT_S)
    finally:
        cluster.link("h2", up=True)
        rs.kill_tagged(j.tag)


@pytest.mark.parametrize("shape", ["netem", "tbf"])
def test_slow_link_keeps_training_correct(tmp_path, cluster, shape):
    """A slow link: netem delay + loss where the kernel has sch_netem, else (and also) a
    token-bucket rate limit. The job goes on, slower, with correct results."""
    if shape == "netem":
        if not cluster.netem_available():
            pytest.skip("the kernel has no sch_netem (tc qdisc netem: unknown qdisc kind)")
        apply, undo = (lambda: cluster.netem("h2", "delay 5ms 2ms loss 1%"),
                       lambda: cluster.netem("h2", None))
    else:
        apply, undo = (lambda: cluster.rate_limit("h2", "40mbit"),
                       lambda: cluster.rate_limit("h2", None))
    apply()
    try:
        j = job(tmp_path, cluster, "faults.py", "--mode", "slow", "--iters", 6,
                "--seed", 3, env=rs.job_env(PERSEUS_TIMEOUT=30)).run()
    finally:
        undo()
    assert j.returncode == 0, j.output()
    timing = [r for recs in j.results_by_rank().values() for r in recs
              if r["outcome"] == "timing"]
    assert len(timing) == 4, j.output()
    print("slow link (%s): %.2f s for 6 rounds" % (shape, max(r["seconds"] for r in timing)))
    j.assert_clean()


def test_host_not_in_hostfile_slots(tmp_path, cluster):
    """More ranks than the hosts' slots: refused at once with the slots named."""
    j = rs.Job(tmp_path, "faults.py", "--mode", "slow", np=6, hosts=cluster.hosts_arg(2),
               cluster=cluster, timeout=30).run()
    assert j.returncode == 2, j.output()
    assert "more processes than the 4 slots" in j.stderr, j.output()


def test_unreachable_host(tmp_path, cluster):
    """An address where no host answers: ssh fails (no route / timeout) and the job ends
    with that rank and host named, within the start timeout, never a hang."""
    hosts = "%s:2,10.213.7.250:1" % cluster.address("h1")
    j = rs.Job(tmp_path, "faults.py", "--mode", "slow", "--iters", 1, np=3, hosts=hosts,
               cluster=cluster, env=rs.job_env(PERSEUS_START_TIMEOUT=15), timeout=120)
    t0 = time.time()
    j.run()
    assert j.returncode != 0, j.output()
    assert "10.213.7.250" in j.stderr, j.output()
    print("  unreachable: %s" % [l for l in j.stderr.splitlines() if "10.213.7.250" in l][:2])
    assert time.time() - t0 < 15 + 60, j.output()
    j.assert_clean()


def test_host_refusing_ssh(tmp_path, cluster):
    """A host that is up but where ssh is refused (no sshd on that port): ssh's own error,
    the rank and host named, at once."""
    hosts = "%s:1,%s:1" % (cluster.address("h1"), cluster.address("h2"))
    j = rs.Job(tmp_path, "faults.py", "--mode", "slow", "--iters", 1, np=2, hosts=hosts,
               cluster=cluster, extra=["-p", "2"], timeout=60)
    t0 = time.time()
    j.run()
    assert j.returncode == 255, j.output()
    assert "on host %s exited with code 255" % cluster.address("h1") in j.stderr or \
        "on host %s exited with code 255" % cluster.address("h2") in j.stderr, j.output()
    assert "refused" in j.stderr.lower(), j.output()
    assert time.time() - t0 < 30
    j.assert_clean()
