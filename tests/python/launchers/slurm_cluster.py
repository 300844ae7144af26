"""A real Slurm (Debian's slurmctld, slurmd and munge) on the network-namespace test hosts of
tests/python/multihost/netns_hosts.py: munged on a private socket, slurmctld in the controller's
namespace, one slurmd in each host's namespace. Each daemon (and every job step it starts)
runs in its own UTS and mount namespace, so that each node has its own host name and an
/etc/hosts that resolves the node names to the namespaces' addresses, as on a cluster.
Everything runs as root (CI does) from files in a temporary directory, and is stopped on
exit, also after a failing test.

    with netns_hosts.VirtualCluster(["h1", "h2"]) as net, SlurmCluster(net) as slurm:
        slurm.run(["srun", "-N", "2", "hostname"])      # from the controller's namespace
"""
import os
import shutil
import subprocess
import tempfile
import time

NODE_NAMES = ("pn01", "pn02", "pn03", "pn04")


def available():
    return all(shutil.which(p) for p in ("slurmctld", "slurmd", "srun", "munged", "unshare"))


class SlurmCluster:
    def __init__(self, net, cpus=2):
        self.net = net
        self.nodes = dict(zip(NODE_NAMES, net.hosts))  # node name -> netns host
        self.cpus = cpus
        self.tmp = tempfile.mkdtemp(prefix="perseus-slurm-")
        os.chmod(self.tmp, 0o755)
        self.conf = os.path.join(self.tmp, "slurm.conf")
        self.hosts_file = os.path.join(self.tmp, "hosts")
        self.munge_socket = os.path.join(self.tmp, "munge", "munge.socket")
        self.procs = []

    def nodelist(self):
        return "pn[01-%02d]" % len(self.nodes)

    def __enter__(self):
        try:
            self._write_files()
            self._start_munge()
            self._start(self.net.controller, "ctl", ["slurmctld", "-D", "-i", "-f", self.conf],
                        "slurmctld")
            for node, host in self.nodes.items():
                self._start(host, node, ["slurmd", "-D", "-f", self.conf, "-N", node],
                            "slurmd-" + node)
            self._wait_idle()
        except Exception:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def log(self, name):
        try:
            with open(os.path.join(self.tmp, name + ".log")) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def close(self):
        if self.procs and shutil.which("scancel"):
            self.run(["scancel", "--quiet", "--full", "-u", "root"], check=False, timeout=10)
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs = []
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- set-up -------------------------------------------------------------------------
    def _write_files(self):
        with open(self.hosts_file, "w") as f:
            f.write("127.0.0.1 localhost\n%s ctl\n" % self.net.address(self.net.controller))
            for node, host in self.nodes.items():
                f.write("%s %s\n" % (self.net.address(host), node))
        os.makedirs(os.path.join(self.tmp, "state"))
        for node in self.nodes:
            os.makedirs(os.path.join(self.tmp, "spool-" + node))
        lines = [
            "ClusterName=perseus",
            "SlurmctldHost=ctl(%s)" % self.net.address(self.net.controller),
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge",
            "AuthInfo=socket=%s" % self.munge_socket,
            "StateSaveLocation=%s/state" % self.tmp,
            "SlurmdSpoolDir=%s/spool-%%n" % self.tmp,
            "SlurmctldPidFile=%s/slurmctld.pid" % self.tmp,
            "SlurmdPidFile=%s/slurmd-%%n.pid" % self.tmp,
            "SlurmctldLogFile=%s/slurmctld.log" % self.tmp,
            "SlurmdLogFile=%s/slurmd-%%n.log" % self.tmp,
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "MpiDefault=none", "SwitchType=switch/none", "LaunchParameters=use_interactive_step",
            "SchedulerType=sched/builtin", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "ReturnToService=2",
            "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=3", "MinJobAge=5",
            "MessageTimeout=20",
        ]
        for node in self.nodes:
            lines.append("NodeName=%s NodeAddr=%s CPUs=%d State=UNKNOWN"
                         % (node, self.net.address(self.nodes[node]), self.cpus))
        lines.append("PartitionName=test Nodes=%s Default=YES MaxTime=10 State=UP "
                     "OverSubscribe=YES" % self.nodelist())
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _start_munge(self):
        d = os.path.dirname(self.munge_socket)
        os.makedirs(d, mode=0o755)
        key = os.path.join(self.tmp, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(128))
        os.chmod(key, 0o600)
        proc = subprocess.Popen(
            ["munged", "-F", "--force", "--socket=" + self.munge_socket, "--key-file=" + key,
             "--pid-file=" + os.path.join(self.tmp, "munged.pid"),
             "--log-file=" + os.path.join(self.tmp, "munged.log"),
             "--seed-file=" + os.path.join(self.tmp, "munged.seed")],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        self._wait_for(lambda: os.path.exists(self.munge_socket), "munged", "munged")

    def wrap(self, host, node_name, cmd):
        """`cmd` inside `host`'s network namespace, with the node's own host name and the
        cluster's /etc/hosts."""
        script = 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"'
        # nsenter, not `ip netns exec`, which remounts /sys and so hides the cgroup file
        # systems that slurmd needs to find.
        return (["nsenter", "--net=/run/netns/" + self.net.names[host], "unshare", "--uts",
                 "--mount", "sh", "-c", script, self.hosts_file, node_name] + list(cmd))

    def env(self, **extra):
        env = dict(os.environ)
        env["SLURM_CONF"] = self.conf
        env.update(extra)
        return env

    def _start(self, host, node_name, cmd, log_name):
        log = open(os.path.join(self.tmp, log_name + ".out"), "w")
        proc = subprocess.Popen(self.wrap(host, node_name, cmd), env=self.env(),
                                stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)

    def _wait_for(self, ready, what, log_name, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if ready():
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        raise RuntimeError("%s did not come up:\n%s%s" % (
            what, self.log(log_name), self._outputs()))

    def _outputs(self):
        text = ""
        for name in sorted(os.listdir(self.tmp)):
            if name.endswith(".out") or name.endswith(".log"):
                with open(os.path.join(self.tmp, name)) as f:
                    text += "\n--- %s\n%s" % (name, f.read()[-2000:])
        return text

    def _wait_idle(self):
        def idle():
            r = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, timeout=10)
            states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
            return len(states) == len(self.nodes) and all(
                s in ("idle", "mix", "alloc") for s in states.values())
        self._wait_for(idle, "the slurmd's", "slurmctld", timeout=60)

    # --- use ---------------------------------------------------------------------------
    def run(self, cmd, check=True, timeout=120, env=None, **kw):
        """Runs a Slurm client command (srun, sbatch, squeue...) in the controller's namespace."""
        r = subprocess.run(self.wrap(self.net.controller, "ctl", cmd), env=env or self.env(),
                           capture_output=True, text=True, timeout=timeout, **kw)
        if check and r.returncode != 0:
            raise AssertionError("%s exited %d\nstdout:\n%s\nstderr:\n%s%s" % (
                " ".join(cmd), r.returncode, r.stdout, r.stderr, self._outputs()))
        return r

    def wait_job(self, job_id, timeout=90):
        """Waits until the job has left the queue."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = self.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], check=False, timeout=10)
            if r.returncode != 0 or not r.stdout.strip():
                return
            time.sleep(0.3)
        raise AssertionError("job %s still queued after %d s:\n%s" % (
            job_id, timeout, self._outputs()))
