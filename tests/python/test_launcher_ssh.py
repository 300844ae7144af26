"""perseusrun's ssh path against a real sshd (openssh-server) that the test starts on a spare
port of 127.0.0.2, an address perseusrun treats as a remote host."""

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from perseus_test_support import job_env, perseusrun

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(shutil.which("/usr/sbin/sshd") is None or os.geteuid() != 0,
                                 reason="needs openssh-server and root")]
PY = sys.executable
HOST = "127.0.0.2"


def _free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    d = tmp_path_factory.mktemp("sshd")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d / "host_key"],
                   check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", d / "user_key"],
                   check=True)
    shutil.copy(d / "user_key.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(
        "Port %d\nListenAddress %s\nHostKey %s\nAuthorizedKeysFile %s\nPidFile %s\n"
        "PermitRootLogin yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nAcceptEnv none\n"
        % (port, HOST, d / "host_key", d / "authorized_keys", d / "sshd.pid"))
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", d / "sshd_config"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    yield port, str(d / "user_key")
    proc.terminate()
    proc.wait(timeout=10)


def test_remote_rank_joins_the_job(sshd):
    port, key = sshd
    code = ("import os, numpy as np; from perseus import _core; _core.init();"
            "t = _core.topology(); a = np.full(3, t['rank'] + 1.0, dtype=np.float32);"
            "_core.allreduce('x', a, None, 0).wait();"
            "print('rank', t['rank'], 'host', os.environ['PERSEUS_HOSTNAME'], a.tolist(),"
            " os.environ.get('SSH_CONNECTION') is not None)")
    r = perseusrun(["-np", 2, "-H", "localhost:1,%s:1" % HOST, "-p", port, "-i", key,
                    PY, "-c", code])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[0]<stdout>:rank 0 host localhost [3.0, 3.0, 3.0] False" in r.stdout
    assert "[1]<stdout>:rank 1 host %s [3.0, 3.0, 3.0] True" % HOST in r.stdout


def test_remote_failure_and_teardown(sshd, tmp_path):
    port, key = sshd
    pid_file = tmp_path / "remote.pid"
    code = ("import os, sys, time\n"
            "if os.environ['PERSEUS_RANK'] == '0':\n"
            "    end = time.time() + 30\n"
            "    while not os.path.exists(sys.argv[1]) and time.time() < end: time.sleep(0.1)\n"
            "    time.sleep(0.5); print('local fails', file=sys.stderr); sys.exit(4)\n"
            "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(100)\n")
    r = perseusrun(["-np", 2, "-H", "localhost:1,%s:1" % HOST, "-p", port, "-i", key,
                    PY, "-c", code, pid_file])
    assert r.returncode == 4, r.stderr
    assert "rank 0 on host localhost exited with code 4" in r.stderr
    remote_pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while os.path.exists("/proc/%d" % remote_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists("/proc/%d" % remote_pid), "remote rank outlived the job"


def test_remote_exit_code(sshd):
    port, key = sshd
    r = perseusrun(["-np", 1, "-H", "%s:1" % HOST, "-p", port, "-i", key, PY, "-c",
                    "import sys; print('remote err', file=sys.stderr); sys.exit(5)"],
                   env=job_env())
    assert r.returncode == 5, r.stderr
    assert "rank 0 on host %s exited with code 5" % HOST in r.stderr
    assert "remote err" in r.stderr
