"""Where an elastic job may run: the host discovery script (or a fixed -H/--hostfile list) and
the blacklist of hosts and slots that failed. Used by the elastic driver's thread only."""

import random
import subprocess
import time

from perseus.runner.wording import entry

# A discovery script that takes longer than this is treated as having failed this round.
SCRIPT_TIMEOUT_S = 10.0


class ScriptDiscovery:
    """Runs --host-discovery-script; each line of its output is 'host:slots' or a bare 'host'
    (which gets --slots-per-host slots), as horovodrun's, or 'host slots=N' as in a hostfile.
    Blank lines and '#' comments are skipped."""

    def __init__(self, script, default_slots):
        self.script = script
        self.default_slots = default_slots

    def describe(self):
        return "the host discovery script %s" % self.script

    def find(self):
        """{host: slots} in the order printed. Raises RuntimeError when the script fails."""
        try:
            out = subprocess.run(self.script, shell=True, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, timeout=SCRIPT_TIMEOUT_S,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise RuntimeError("host discovery script %s did not finish within %.0f s"
                               % (self.script, SCRIPT_TIMEOUT_S))
        if out.returncode != 0:
            raise RuntimeError("host discovery script %s exited with code %d: %s"
                               % (self.script, out.returncode,
                                  out.stderr.decode(errors="replace").strip()[-500:]))
        return parse_discovery_output(out.stdout.decode(errors="replace"), self.default_slots)


class FixedDiscovery:
    """-H/--hostfile with --min-np: the hosts never change, but those that fail drop out."""

    def __init__(self, host_list):
        self.hosts = {h.host: h.slots for h in host_list}

    def describe(self):
        return "the hosts %s" % ",".join("%s:%d" % kv for kv in self.hosts.items())

    def find(self):
        return dict(self.hosts)


def parse_discovery_output(text, default_slots):
    hosts = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) == 2 and fields[1].startswith("slots="):  # hostfile syntax
            host, sep, slots = fields[0], "=", fields[1][len("slots="):]
        elif len(fields) > 1:
            raise RuntimeError("host discovery output line '%s' is not 'host:slots', "
                               "'host slots=N' or 'host'" % line)
        else:
            host, sep, slots = line.rpartition(":")
        if not sep:
            host, slots = line, str(default_slots)
        try:
            count = int(slots)
        except ValueError:
            count = 0
        if not host or count < 1:
            raise RuntimeError("host discovery output line '%s' is not 'host:slots' with "
                               "slots >= 1" % line)
        hosts[host] = count
    return hosts


class Blacklist:
    """Hosts (and single slots) that failed. Without a cooldown range an entry is permanent, as
    in horovodrun; with --blacklist-cooldown-range lo hi it lasts lo * 2^(n-1) seconds plus up
    to lo seconds of jitter, at most hi, for the n-th time the same entry is blacklisted."""

    def __init__(self, cooldown_range=None):
        self.cooldown = cooldown_range
        self.until = {}  # key -> monotonic time it ends (float('inf'): never)
        self.count = {}

    def add(self, key):
        n = self.count.get(key, 0) + 1
        self.count[key] = n
        if self.cooldown is None:
            self.until[key] = float("inf")
            return None
        lo, hi = self.cooldown
        delay = min(hi, lo * (2 ** (n - 1)) + random.uniform(0, lo))
        self.until[key] = time.monotonic() + delay
        return delay

    def contains(self, key):
        end = self.until.get(key)
        return end is not None and time.monotonic() < end

    def listed(self):
        return sorted(entry(k) for k in self.until if self.contains(k))
