"""Several "hosts" on one machine for multi-host tests: Linux network namespaces joined by
veth pairs to a bridge that lives in its own namespace, each host with its own address and a
real sshd (Debian's openssh-server) that accepts a key made for the test.

Needs root (CI runs as root). Addresses are private and exist only inside these namespaces;
nothing here routes to the machine's own network. Everything is torn down on exit, also after
a failing test.

    with VirtualCluster(["h1", "h2"]) as cluster:
        cluster.run("h1", ["hostname"])            # runs inside h1's namespace
        cluster.address("h2")                      # "10.213.7.3"
        cluster.ssh_args()                         # ["-i", key, "-o", ...] for perseusrun
"""
import os
import shutil
import subprocess
import tempfile
import time
import uuid

SUBNET = "10.213.7"


def _sh(*cmd, check=True, **kw):
    return subprocess.run(list(cmd), check=check, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, **kw)


def available():
    """True when this process may create namespaces and an sshd exists."""
    if os.geteuid() != 0 or not shutil.which("ip") or not os.path.exists("/usr/sbin/sshd"):
        return False
    probe = f"pprobe{uuid.uuid4().hex[:6]}"
    ok = _sh("ip", "netns", "add", probe, check=False).returncode == 0
    if ok:
        _sh("ip", "netns", "del", probe, check=False)
    return ok


class VirtualCluster:
    def __init__(self, hosts, controller="ctl", ssh_port=22, own_hostnames=False):
        tag = uuid.uuid4().hex[:5]
        self.tag = tag
        self.hosts = list(hosts)
        self.controller = controller
        self.ssh_port = ssh_port
        self.names = {h: f"p{tag}{h}" for h in self.hosts + [controller]}
        self.bridge_ns = f"p{tag}br"
        self.addresses = {h: f"{SUBNET}.{i + 2}" for i, h in enumerate(self.hosts + [controller])}
        self.tmp = tempfile.mkdtemp(prefix="perseus-cluster-")
        self.sshd = {}
        # True: each host's sshd (and so everything started through ssh) runs in its own UTS
        # namespace whose host name is the host's name, as launchers that name hosts by
        # gethostname() (mpiexec, mpirun) expect.
        self.own_hostnames = own_hostnames

    # --- lifetime -------------------------------------------------------------------------
    def __enter__(self):
        try:
            self._create_network()
            self._make_keys()
            for h in self.hosts:
                self._start_sshd(h)
        except Exception:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for proc in self.sshd.values():
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        for ns in list(self.names.values()) + [self.bridge_ns]:
            # Killing what is left in a namespace before deleting it leaves no orphans behind.
            pids = _sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- network --------------------------------------------------------------------------
    def _create_network(self):
        _sh("ip", "netns", "add", self.bridge_ns)
        self.exec_ns(self.bridge_ns, ["ip", "link", "add", "br0", "type", "bridge"])
        self.exec_ns(self.bridge_ns, ["ip", "link", "set", "br0", "up"])
        for i, (host, ns) in enumerate(self.names.items()):
            _sh("ip", "netns", "add", ns)
            inner, outer = f"v{self.tag}{i}a", f"v{self.tag}{i}b"
            _sh("ip", "link", "add", inner, "netns", ns, "type", "veth", "peer", "name", outer,
                "netns", self.bridge_ns)
            self.exec_ns(self.bridge_ns, ["ip", "link", "set", outer, "master", "br0"])
            self.exec_ns(self.bridge_ns, ["ip", "link", "set", outer, "up"])
            self.exec_ns(ns, ["ip", "link", "set", "lo", "up"])
            self.exec_ns(ns, ["ip", "link", "set", inner, "name", "eth0"])
            self.exec_ns(ns, ["ip", "addr", "add", f"{self.addresses[host]}/24", "dev", "eth0"])
            self.exec_ns(ns, ["ip", "link", "set", "eth0", "up"])

    def exec_ns(self, ns, cmd, **kw):
        return _sh("ip", "netns", "exec", ns, *cmd, **kw)

    def run(self, host, cmd, **kw):
        return self.exec_ns(self.names[host], cmd, **kw)

    def popen(self, host, cmd, **kw):
        return subprocess.Popen(["ip", "netns", "exec", self.names[host]] + list(cmd), **kw)

    def address(self, host):
        return self.addresses[host]

    def link(self, host, up):
        """Cuts (up=False) or restores the host's only link."""
        self.run(host, ["ip", "link", "set", "eth0", "up" if up else "down"])

    def netem(self, host, spec):
        """Shapes the host's link, e.g. spec="delay 20ms loss 1%"; spec=None removes it."""
        if spec is None:
            self.run(host, ["tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
        else:
            self.run(host, ["tc", "qdisc", "replace", "dev", "eth0", "root", "netem"] + spec.split())

    def rate_limit(self, host, rate):
        """Shapes the host's link to `rate` (e.g. "30mbit") with a token bucket (sch_tbf); a
        slow link where sch_netem (delay, loss) is missing from the kernel. None removes it."""
        if rate is None:
            self.run(host, ["tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
        else:
            self.run(host, ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate,
                            "burst", "64kb", "latency", "400ms"])

    def netem_available(self):
        """True when the kernel has sch_netem (probed on the controller's link)."""
        ns = self.names[self.controller]
        ok = self.exec_ns(ns, ["tc", "qdisc", "replace", "dev", "eth0", "root", "netem",
                               "delay", "1ms"], check=False).returncode == 0
        self.exec_ns(ns, ["tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
        return ok

    # --- ssh ------------------------------------------------------------------------------
    def _make_keys(self):
        self.client_key = os.path.join(self.tmp, "id_ed25519")
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.client_key)
        self.host_key = os.path.join(self.tmp, "host_ed25519")
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.host_key)
        shutil.copy(self.client_key + ".pub", os.path.join(self.tmp, "authorized_keys"))
        os.chmod(self.tmp, 0o700)

    def _start_sshd(self, host):
        cfg = os.path.join(self.tmp, f"sshd_{host}.conf")
        with open(cfg, "w") as f:
            f.write(f"""Port {self.ssh_port}
ListenAddress {self.addresses[host]}
HostKey {self.host_key}
AuthorizedKeysFile {self.tmp}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile {self.tmp}/sshd_{host}.pid
AcceptEnv PERSEUS_* OMP_* MXNET_* PYTHON*
Subsystem sftp internal-sftp
""")
        os.makedirs("/run/sshd", exist_ok=True)
        sshd = ["/usr/sbin/sshd", "-D", "-e", "-f", cfg]
        if self.own_hostnames:
            sshd = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host] + sshd
        proc = self.popen(host, sshd,
                          stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.tmp, f"sshd_{host}.log"), "w"))
        self.sshd[host] = proc
        deadline = time.time() + 10
        while time.time() < deadline:
            probe = self.run(self.controller, ["ssh"] + self.ssh_args() + [self.addresses[host], "true"],
                             check=False, timeout=10)
            if probe.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"sshd on {host} did not come up: {open(os.path.join(self.tmp, f'sshd_{host}.log')).read()}")

    def perseusrun_args(self):
        """The subset of ssh_args() that perseusrun takes (-i, -p)."""
        return ["-i", self.client_key, "-p", str(self.ssh_port)]

    def hosts_arg(self, slots):
        """perseusrun's -H value for `slots` ranks on every host: "10.213.7.2:2,..."."""
        return ",".join("%s:%d" % (self.addresses[h], slots) for h in self.hosts)

    def ssh_args(self):
        return ["-i", self.client_key, "-p", str(self.ssh_port), "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
                "-o", "ConnectTimeout=5"]
