"""Each launcher starting topology_worker.py as 4 ranks on 2 network-namespace hosts (h1, h2:
2 ranks each) the way a user on a cluster would, for the tests and for
bench/launch_to_first_allreduce.py. Each returns a Launch with the exit code, the combined
output, and the wall time at which the launch command started."""
import collections
import os
import subprocess
import sys
import tempfile
import time

from launchsupport import MPIEXEC_IMPI, TEST_SECRET, WORKER, python_env

PY = sys.executable
MPIEXEC_MPICH = "/usr/bin/mpiexec.mpich"
Launch = collections.namedtuple("Launch", "returncode output started")


def _wait(procs, started, timeout):
    out = []
    codes = []
    deadline = time.time() + timeout
    for p in procs:
        try:
            out.append(p.communicate(timeout=max(1, deadline - time.time()))[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out.append(p.communicate()[0] + "\n[timed out after %d s]" % timeout)
        codes.append(p.returncode)
    bad = [c for c in codes if c != 0]
    return Launch(bad[0] if bad else 0, "".join(out), started)


class MultiHostLaunchers:
    def __init__(self, net, slurm=None, timeout=90):
        self.net = net
        self.slurm = slurm
        self.timeout = timeout
        self.tmp = tempfile.mkdtemp(prefix="perseus-launch-")
        self.ssh = os.path.join(self.tmp, "ssh")
        with open(self.ssh, "w") as f:  # an ssh with the test key, for mpiexec and mpirun
            f.write("#!/bin/sh\nexec ssh %s \"$@\"\n" % " ".join(net.ssh_args()))
        os.chmod(self.ssh, 0o755)
        self.h1, self.h2 = net.hosts[:2]
        # Host names resolve on a cluster; torch's c10d rendezvous insists on it.
        self.hosts_file = os.path.join(self.tmp, "hosts")
        with open(self.hosts_file, "w") as f:
            f.write("127.0.0.1 localhost\n" + "".join(
                "%s %s\n" % (net.address(h), h) for h in net.hosts))

    def _ctl(self, cmd, env):
        started = time.time()
        p = self.net.popen(self.net.controller, cmd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        return _wait([p], started, self.timeout)

    def perseusrun(self, *args):
        return self._ctl([PY, "-m", "perseus.runner", "-np", "4", "-H", self.net.hosts_arg(2)] +
                         self.net.perseusrun_args() + list(args) + [PY, WORKER], python_env())

    def mpirun(self):
        """Open MPI over ssh with a hostfile: what a Kubeflow MPIJob's launcher runs."""
        hostfile = os.path.join(self.tmp, "hostfile")
        with open(hostfile, "w") as f:
            for h in (self.h1, self.h2):
                f.write("%s slots=2\n" % self.net.address(h))
        env = python_env()
        forward = [a for k in ("PYTHONPATH", "PERSEUS_BUILD_DIR", "PYTHONUNBUFFERED",
                               "PERSEUS_START_TIMEOUT") if k in env for a in ("-x", k)]
        return self._ctl(["mpirun", "--allow-run-as-root", "--hostfile", hostfile, "-np", "4",
                          "--mca", "plm_rsh_agent", self.ssh, "--mca", "oob_tcp_if_include",
                          "eth0", "--mca", "btl_tcp_if_include", "eth0", "--mca", "btl",
                          "self,tcp"] + forward + [PY, WORKER], env)

    def mpiexec_mpich(self):
        hosts = ",".join("%s:2" % self.net.address(h) for h in (self.h1, self.h2))
        return self._ctl([MPIEXEC_MPICH, "-launcher", "ssh", "-launcher-exec", self.ssh,
                          "-iface", "eth0", "-hosts", hosts, "-n", "4", PY, WORKER], python_env())

    def mpiexec_impi(self):
        """Intel MPI's mpiexec.hydra over ssh, 2 ranks per host (-ppn)."""
        hosts = ",".join(self.net.address(h) for h in (self.h1, self.h2))
        return self._ctl([MPIEXEC_IMPI, "-bootstrap", "ssh", "-bootstrap-exec", self.ssh,
                          "-iface", "eth0", "-hosts", hosts, "-ppn", "2", "-n", "4", PY, WORKER],
                         python_env())

    def _torchrun_on_each_host(self, args_of_node, api):
        started = time.time()
        procs = []
        for node, host in enumerate((self.h1, self.h2)):
            cmd = ["unshare", "--uts", "--mount", "sh", "-c",
                   'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"',
                   self.hosts_file, host, PY, "-m", "torch.distributed.run", "--nnodes", "2",
                   "--nproc-per-node", "2"]
            cmd += args_of_node(node, host) + [WORKER, "--api", api]
            procs.append(self.net.popen(host, cmd, env=python_env(PERSEUS_SECRET=TEST_SECRET),
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True))
        return _wait(procs, started, self.timeout)

    def torchrun_static(self, port=29500, api="core"):
        master = self.net.address(self.h1)
        return self._torchrun_on_each_host(
            lambda node, host: ["--node-rank", str(node), "--master-addr", master,
                                "--master-port", str(port)], api)

    def torchrun_c10d(self, port=29400, api="core"):
        endpoint = "%s:%d" % (self.net.address(self.h1), port)
        return self._torchrun_on_each_host(
            lambda node, host: ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                                "--rdzv-id", "perseus", "--local-addr", self.net.address(host)],
            api)

    def srun(self, *extra):
        started = time.time()
        r = self.slurm.run(["srun", "-N", "2", "--ntasks-per-node", "2"] + list(extra) +
                           [PY, WORKER], check=False, timeout=self.timeout,
                           env=self.slurm.env(**python_env(PERSEUS_SECRET=TEST_SECRET)))
        return Launch(r.returncode, r.stdout + r.stderr, started)
