"""perseusrun end to end: real processes, signals, output, environment."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from perseus_test_support import job_env, perseusrun

pytestmark = pytest.mark.timeout(120)
PY = sys.executable


def test_output_prefixes_and_topology_env():
    code = ("import os,sys; e=os.environ; print(e['PERSEUS_RANK'], e['PERSEUS_SIZE'], "
            "e['PERSEUS_LOCAL_RANK'], e['PERSEUS_LOCAL_SIZE'], e['PERSEUS_CROSS_RANK'], "
            "e['PERSEUS_CROSS_SIZE'], e['OMP_NUM_THREADS'], e['MXNET_USE_OPERATOR_TUNING'], "
            "len(e['PERSEUS_SECRET']), e['PERSEUS_CONTROLLER_PORT'].isdigit()); "
            "print('err', file=sys.stderr); "
            "assert e['PERSEUS_SECRET'] not in open('/proc/self/cmdline').read()")
    r = perseusrun(["-np", 3, PY, "-c", code])
    assert r.returncode == 0, r.stderr
    omp = str(max(1, len(os.sched_getaffinity(0)) // 3))
    for rank in range(3):
        assert "[%d]<stdout>:%d 3 %d 3 0 1 %s 0 64 True\n" % (rank, rank, rank, omp) in r.stdout
        assert "[%d]<stderr>:err\n" % rank in r.stderr


def test_thread_default_counts_the_cpus_the_job_may_use():
    """OMP_NUM_THREADS divides the CPUs perseusrun may run on (taskset, a cpuset), not the
    host's, among the local ranks."""
    code = "import os; print('omp', os.environ['OMP_NUM_THREADS'])"
    r = subprocess.run(["taskset", "-c", "0", PY, "-m", "perseus.runner", "-np", "1", PY, "-c",
                        code], env=job_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "[0]<stdout>:omp 1\n" in r.stdout, r.stdout


def test_user_env_wins_and_tuning_flags():
    code = ("import os; e=os.environ; print(e['OMP_NUM_THREADS'], e['NCCL_NVLS_ENABLE'], "
            "e['PERSEUS_FUSION_THRESHOLD'], e['PERSEUS_TIMEOUT'], "
            "e['PERSEUS_HIERARCHICAL_ALLREDUCE'], e['PERSEUS_LOG_LEVEL'])")
    r = perseusrun(["-np", 1, "--fusion-threshold-mb", 2, "--timeout", 7,
                    "--no-hierarchical-allreduce", "--log-level", "ERROR", "--", PY, "-c", code],
                   env=job_env(OMP_NUM_THREADS="5", NCCL_NVLS_ENABLE="0"))
    assert r.returncode == 0, r.stderr
    assert "[0]<stdout>:5 0 2097152 7.0 0 error" in r.stdout


def test_failing_rank_stops_the_others():
    code = ("import os,sys,time; r=int(os.environ['PERSEUS_RANK'])\n"
            "if r == 1:\n    print('boom happened', file=sys.stderr); sys.exit(3)\n"
            "time.sleep(60)")
    start = time.monotonic()
    r = perseusrun(["-np", 3, PY, "-c", code])
    assert r.returncode == 3
    assert time.monotonic() - start < 20
    assert "rank 1 on host localhost exited with code 3" in r.stderr
    assert "boom happened" in r.stderr.split("last lines of its stderr")[1]


def test_rank_killed_by_signal():
    code = ("import os,signal,time\nif os.environ['PERSEUS_RANK'] == '0':\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(60)")
    r = perseusrun(["-np", 2, PY, "-c", code])
    assert r.returncode == 128 + signal.SIGKILL
    assert "rank 0 on host localhost was killed by signal 9 (SIGKILL)" in r.stderr


def test_rank_that_left_early_is_named():
    """Rank 1 leaves (exit 0, shutdown at exit) while rank 0 still runs a collective: rank 0's
    error and perseusrun's summary both name rank 1 and its host."""
    code = ("import os,sys,time\nimport numpy as np\nimport perseus.common as c\n"
            "c.init()\nif c.rank() == 1:\n    sys.exit(0)\ntime.sleep(0.5)\n"
            "try:\n    c.core().allreduce('g', np.ones(3, np.float32)).wait()\n"
            "except Exception as e:\n    print('ERR', e, file=sys.stderr); sys.exit(1)")
    r = perseusrun(["-np", 2, PY, "-c", code])
    assert r.returncode == 1, r.stderr
    assert re.search(r"\[0\]<stderr>:ERR .*shut down: rank 1 on host localhost called shutdown",
                     r.stderr), r.stderr
    assert "rank 1 on host localhost had left the job before: it exited with code 0" in r.stderr


def test_rank_that_raised_is_named_not_the_survivor():
    """Rank 1 raises (and shuts down at exit) while rank 0 waits in a collective: both exit 1,
    and perseusrun's summary names rank 1, the cause, not rank 0."""
    code = ("import sys\nimport numpy as np\nimport perseus.common as c\nc.init()\n"
            "if c.rank() == 1:\n    raise RuntimeError('bad batch')\n"
            "c.core().allreduce('g', np.ones(3, np.float32)).wait()")
    r = perseusrun(["-np", 2, PY, "-c", code])
    assert r.returncode == 1, r.stderr
    assert "rank 1 on host localhost exited with code 1" in r.stderr, r.stderr
    assert "bad batch" in r.stderr.split("last lines of its stderr")[1]


def test_success_exit_code_and_output_files(tmp_path):
    logs = tmp_path / "logs"
    r = perseusrun(["-np", 2, "--output-filename", logs, PY, "-c",
                    "import os,sys; print('hi', os.environ['PERSEUS_RANK']); "
                    "print('oops', file=sys.stderr)"])
    assert r.returncode == 0
    for rank in range(2):
        assert (logs / ("rank.%d" % rank) / "stdout").read_text() == "hi %d\n" % rank
        assert (logs / ("rank.%d" % rank) / "stderr").read_text() == "oops\n"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0); it is dead for our purpose
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _start_silent_job(tmp_path, init=True):
    """perseusrun -np 2 whose ranks each start a child and then sleep without a word; returns
    perseusrun's Popen and the folder where each rank writes 'its pid, its child's pid'."""
    pids = tmp_path / "pids"
    pids.mkdir()
    code = ("import os,subprocess,sys,time\n"
            + ("import perseus.common as c; c.init()\n" if init else "") +
            "child = subprocess.Popen(['sleep', '100'])\n"
            "open(os.path.join(sys.argv[1], os.environ['PERSEUS_RANK']), 'w')"
            ".write('%d %d' % (os.getpid(), child.pid))\n"
            "time.sleep(100)")
    proc = subprocess.Popen([PY, "-m", "perseus.runner", "-np", "2", PY, "-c", code, str(pids)],
                            env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while len(os.listdir(pids)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(os.listdir(pids)) == 2, proc.communicate(timeout=5)
    time.sleep(0.3)
    return proc, pids


def _job_pids(pids):
    return [int(p) for f in os.listdir(pids) for p in (pids / f).read_text().split()]


def _survivors(pids, within_s):
    deadline = time.monotonic() + within_s
    while True:
        left = [p for p in _job_pids(pids) if _alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def test_ctrl_c_stops_everything(tmp_path):
    """SIGINT to perseusrun: every rank and its children die, the exit code is 130, and no
    /dev/shm/perseus-* segment is left."""
    shm_before = {n for n in os.listdir("/dev/shm") if n.startswith("perseus-")}
    proc, pids = _start_silent_job(tmp_path)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "received SIGINT" in err
    assert not _survivors(pids, 0.2)
    assert {n for n in os.listdir("/dev/shm") if n.startswith("perseus-")} <= shm_before


def test_hangup_stops_everything(tmp_path):
    """A closed terminal or ssh session (SIGHUP) stops the job as SIGTERM does, and says so."""
    proc, pids = _start_silent_job(tmp_path, init=False)
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGHUP, err
    assert "received SIGHUP; stopping all ranks" in err
    assert not _survivors(pids, 0.2)


def test_killed_launcher_leaves_no_rank(tmp_path):
    """SIGKILL gives perseusrun no chance to clean up: its guard process (runner/guard.py) ends
    the silent ranks and their children within a few seconds, and says why."""
    proc, pids = _start_silent_job(tmp_path)
    proc.kill()
    left = _survivors(pids, 8.0)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=10)
    assert not left, "ranks outlived a SIGKILLed perseusrun: %s" % left
    assert "the launcher died; stopping its 2 local process groups" in err


def test_cleanup_removes_this_jobs_segments_only():
    """Ranks unlink their segments once every local rank has mapped them, so a name is left
    only by a rank killed during start-up; perseusrun then removes this job's names
    (perseus-<PERSEUS_JOB_ID>-*) and never another job's that appeared meanwhile. Rank 0
    plants one name of each kind, then dies."""
    other = "/dev/shm/perseus-0123456789abcdef-0"
    code = ("import os,signal,sys\n"
            "jid = os.environ['PERSEUS_JOB_ID']\n"
            "print('job', jid, flush=True)\n"
            "if os.environ['PERSEUS_RANK'] == '0':\n"
            "    open('/dev/shm/perseus-%s-7' % jid, 'w').write('left at start-up')\n"
            "    open(sys.argv[1], 'w').write('another job')\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "import time; time.sleep(100)")
    try:
        r = perseusrun(["-np", 2, PY, "-c", code, other])
        assert r.returncode != 0
        assert os.path.exists(other), r.stderr
        jid = re.search(r"job ([0-9a-f]{16})", r.stdout).group(1)
        assert not [n for n in os.listdir("/dev/shm") if n.startswith("perseus-%s-" % jid)]
    finally:
        if os.path.exists(other):
            os.unlink(other)


def test_bad_arguments():
    r = perseusrun(["-np", 4, "-H", "localhost:2", PY, "-c", "pass"])
    assert r.returncode == 2 and "more processes than the 2 slots" in r.stderr
    r = perseusrun(["-np", 2])
    assert r.returncode == 2 and "no command" in r.stderr
    r = perseusrun(["-np", 2, "--no-such-flag", PY])
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["perseusrun: error: unrecognized arguments: --no-such-flag",
                                     "hint: 'perseusrun --help' lists the options"], r.stderr
    r = perseusrun(["-np", 2, "-H", "localhost:1", PY, "-c", "pass"])
    assert "more processes than the 1 slot of the hosts" in r.stderr


def test_blacklist_lists_host_and_slot():
    from perseus.runner.discovery import Blacklist
    b = Blacklist(None)
    b.add(("node7", 1))
    b.add("node8")
    assert b.listed() == ["node7:1", "node8"]


def test_check_build_and_params():
    r = perseusrun(["--check-build"])
    assert r.returncode == 0, r.stderr
    assert "Available Frameworks" in r.stdout and re.search(r"\[X\] PyTorch", r.stdout)
    r = perseusrun(["-v"])  # horovodrun's short --version
    assert r.returncode == 0 and r.stdout.startswith("perseusrun "), r.stderr
    r = perseusrun(["--params"])
    assert r.returncode == 0, r.stderr
    assert "PERSEUS_FUSION_THRESHOLD=" in r.stdout and "PERSEUS_TIMEOUT=" in r.stdout


def test_help_documents_flags():
    r = perseusrun(["-h"])
    assert r.returncode == 0
    for flag in ("--hostfile", "--ssh-port", "--mpi", "--output-filename", "--timeline-filename",
                 "--network-interface", "--start-timeout", "--check-build", "--params"):
        assert flag in r.stdout


def test_mpirun_output_is_split_back_into_lines_per_rank():
    """perseusrun --mpi reads mpirun's tagged output; a rank's line can arrive in two reads,
    with another rank's line between them (seen in CI: '[1,1]<stdout>:rank 1 ...[1,0]<stdout>:
    rank 0 ...\\n[1,1]<stdout>:\\n'). Each rank must still get its whole line. Unit test of the
    splitter on a byte stream: the interleaving cannot be forced through a real mpirun."""
    import io
    from perseus.runner import process

    lines = []

    class Splitter(process.LaunchedProcess):
        def __init__(self):  # no process: only the output splitting
            self.rank = None

        def _emit(self, rank, stream, line):
            lines.append((rank, stream, line))

    data = (b"[1,1]<stdout>:rank 1 size 2 [1.5, 1.5][1,0]<stdout>:rank 0 size 2 [1.5, 1.5]\n"
            b"[1,1]<stdout>:\n[1,0]<stderr>:err\ncontinued\n[1,1]<stdout>:no newline at exit")
    Splitter()._pump_mpirun(io.BytesIO(data), "stdout")
    assert lines == [(0, "stdout", b"rank 0 size 2 [1.5, 1.5]\n"),
                     (1, "stdout", b"rank 1 size 2 [1.5, 1.5]\n"),
                     (0, "stderr", b"err\n"), (0, "stderr", b"continued\n"),
                     (1, "stdout", b"no newline at exit\n")]


_AFFINITY = ("import os\nfrom perseus import _core\n_core.init()\n"
             "print('cpus', os.environ['PERSEUS_LOCAL_RANK'], "
             "','.join(map(str, sorted(os.sched_getaffinity(0)))))\n_core.shutdown()")


def _affinities(result):
    found = re.findall(r"\]<stdout>:cpus (\d+) ([\d,]+)", result.stdout)
    return {int(rank): [int(c) for c in cpus.split(",")] for rank, cpus in found}


def test_ranks_bind_to_their_share_of_the_cores():
    """Note [Binding ranks to cores]: by default each local rank gets its own block of the
    cores perseusrun may use; --bind-to none leaves the scheduler's placement."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        pytest.skip("one usable core: nothing to split")
    r = perseusrun(["-np", 2, PY, "-c", _AFFINITY])
    assert r.returncode == 0, r.stderr
    per = len(usable) // 2
    got = _affinities(r)
    assert sorted(got) == [0, 1] and all(len(cpus) == per for cpus in got.values()), r.stdout
    assert not set(got[0]) & set(got[1]) and set(got[0]) | set(got[1]) <= set(usable), r.stdout
    r = perseusrun(["-np", 2, "--bind-to", "none", PY, "-c", _AFFINITY])
    assert r.returncode == 0, r.stderr
    assert _affinities(r) == {0: usable, 1: usable}, r.stdout
    # More ranks than cores: binding would stack ranks on cores; they stay unbound.
    n = len(usable) + 1
    r = perseusrun(["-np", n, PY, "-c", _AFFINITY])
    assert r.returncode == 0, r.stderr
    assert _affinities(r) == {k: usable for k in range(n)}, r.stdout
