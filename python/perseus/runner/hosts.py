"""Host lists (-H, --hostfile) and the assignment of ranks to hosts and slots."""

import collections
import fcntl
import socket
import struct

from perseus.runner.wording import count

HostSlots = collections.namedtuple("HostSlots", "host slots")


class SlotInfo(collections.namedtuple(
        "SlotInfo", "rank size host local_rank local_size cross_rank cross_size")):
    """Where one rank runs, with the PERSEUS_* topology values it gets."""


def parse_hosts(text):
    """'host1:2,host2:4' (slots default to 1) -> [HostSlots]."""
    result = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, slots = item.rpartition(":")
        if not sep:
            host, slots = item, "1"
        result.append(HostSlots(host, _parse_slots(slots, item)))
    if not result:
        raise ValueError("-H/--hosts is empty; expected host1:slots,host2:slots")
    return result


def parse_hostfile(path):
    """An MPI machine file: 'host slots=N' (or 'host:N', or 'host') per line; '#' comments."""
    result = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            host, slots = fields[0], 1
            if ":" in host:
                host, count = host.rsplit(":", 1)
                slots = _parse_slots(count, "%s:%d" % (path, lineno))
            for field in fields[1:]:
                key, _, value = field.partition("=")
                if key == "slots":
                    slots = _parse_slots(value, "%s:%d" % (path, lineno))
                elif key not in ("max_slots", "max-slots"):  # accepted, not needed
                    raise ValueError("%s:%d: unknown field '%s'; expected 'host slots=N'"
                                     % (path, lineno, field))
            result.append(HostSlots(host, slots))
    if not result:
        raise ValueError("hostfile %s lists no hosts" % path)
    return result


def _parse_slots(value, where):
    try:
        slots = int(value)
    except ValueError:
        slots = -1
    if slots < 1:
        raise ValueError("%s: slots must be a positive integer, got '%s'" % (where, value))
    return slots


def assign_slots(hosts, num_proc):
    """Fills hosts in order (as horovodrun does): ranks 0..slots-1 on the first host, ...
    cross_rank is the host's index among the hosts that have this local_rank."""
    total = sum(h.slots for h in hosts)
    if num_proc > total:
        raise ValueError("-np %d asks for more processes than the %s of the hosts (%s)"
                         % (num_proc, count(total, "slot"), ",".join("%s:%d" % h for h in hosts)))
    placed = []  # (host, local_rank) per rank
    for h in hosts:
        for local_rank in range(h.slots):
            if len(placed) == num_proc:
                break
            placed.append((h.host, local_rank))
    local_size = collections.Counter(host for host, _ in placed)
    hosts_with_local = collections.defaultdict(list)
    for host, local_rank in placed:
        if host not in hosts_with_local[local_rank]:
            hosts_with_local[local_rank].append(host)
    return [SlotInfo(rank, num_proc, host, local_rank, local_size[host],
                     hosts_with_local[local_rank].index(host),
                     len(hosts_with_local[local_rank]))
            for rank, (host, local_rank) in enumerate(placed)]


def _interface_addresses():
    """IPv4 addresses assigned to this machine's interfaces."""
    addresses = {"127.0.0.1"}
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(sock.fileno(), 0x8915,  # SIOCGIFADDR
                                     struct.pack("256s", name.encode()[:15]))
                addresses.add(socket.inet_ntoa(packed[20:24]))
            except OSError:
                pass
    finally:
        sock.close()
    return addresses


def interface_address(name):
    """The IPv4 address of interface `name` (or `name` itself if it is an address)."""
    try:
        socket.inet_aton(name)
        return name
    except OSError:
        pass
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
        return socket.inet_ntoa(packed[20:24])
    except OSError as e:
        raise ValueError("--network-interface %s: no IPv4 address (%s)" % (name, e))
    finally:
        sock.close()


def is_local(host, _cache={}):
    """True when `host` names this machine: a local name, or an address of one of its
    interfaces (127.0.0.2 is not: it is how tests reach a local sshd as a 'remote' host)."""
    if host in _cache:
        return _cache[host]
    names = {"localhost", socket.gethostname(), socket.getfqdn()}
    local = host in names
    if not local:
        try:
            local = socket.gethostbyname(host) in _interface_addresses()
        except OSError:
            local = False
    _cache[host] = local
    return local


def unresolvable(hosts):
    """{host: why} for the hosts whose names do not resolve (a typo, a DNS entry not there yet)."""
    bad = {}
    for host in hosts:
        if is_local(host):
            continue
        try:
            socket.gethostbyname(host)
        except OSError as e:
            bad[host] = e.strerror or str(e)
    return bad


def check_resolvable(hosts):
    """Raises ValueError naming every host that does not resolve."""
    bad = unresolvable(hosts)
    if bad:
        raise ValueError("cannot resolve %s; check the names in -H/--hostfile (or give "
                         "addresses)" % ", ".join("host %s (%s)" % kv for kv in bad.items()))


def address_reaching(host):
    """This machine's address on the route to `host` (no packet is sent)."""
    check_resolvable([host])
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.connect((socket.gethostbyname(host), 9))
        return sock.getsockname()[0]
    finally:
        sock.close()


# --- a Slurm allocation (salloc, sbatch) as the host list -----------------------------------

def _split_top_level(text):
    items, current, depth = [], "", 0
    for c in text:
        depth += (c == "[") - (c == "]")
        if c == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += c
    if depth != 0:
        raise ValueError("'%s' has unbalanced brackets" % text)
    return items + [current]


def expand_slurm_hosts(text):
    """'node[01-04,07],gpu[1-2]-ib' -> ['node01', ..., 'node07', 'gpu1-ib', 'gpu2-ib'], as
    Slurm writes SLURM_JOB_NODELIST (the C++ side has the same in slurm_lists.cc)."""
    hosts = []
    for item in _split_top_level(text):
        if not item:
            raise ValueError("'%s' has an empty host name" % text)
        hosts.extend(_expand_item(item, text))
    return hosts


def _expand_item(item, text):
    open_at = item.find("[")
    if open_at < 0:
        if "]" in item:
            raise ValueError("'%s' has unbalanced brackets" % text)
        return [item]
    close_at = item.find("]", open_at)
    if close_at < 0:
        raise ValueError("'%s' has unbalanced brackets" % text)
    values = []
    for part in _split_top_level(item[open_at + 1:close_at]):
        lo, _, hi = part.partition("-")
        hi = hi or lo
        if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
            raise ValueError("'%s': '%s' is not a range like 01-04" % (text, part))
        values += [str(v).zfill(len(lo)) for v in range(int(lo), int(hi) + 1)]
    tails = _expand_item(item[close_at + 1:], text)
    return [item[:open_at] + v + tail for v in values for tail in tails]


def expand_slurm_counts(text):
    """'2(x3),1' -> [2, 2, 2, 1] (SLURM_TASKS_PER_NODE)."""
    counts = []
    for item in _split_top_level(text):
        count, _, repeat = item.partition("(x")
        repeat = repeat[:-1] if repeat.endswith(")") else (repeat or "1")
        if not (count.isdigit() and repeat.isdigit()):
            raise ValueError("'%s': '%s' is not N or N(xM)" % (text, item))
        counts += [int(count)] * int(repeat)
    return counts


def slurm_allocation(environ):
    """The hosts and slots of the Slurm allocation this process runs in (an salloc shell or an
    sbatch script), as horovodrun takes LSF's: one slot per task Slurm reserved on each node.
    None outside an allocation."""
    nodes = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodes or not environ.get("SLURM_JOB_ID"):
        return None
    hosts = expand_slurm_hosts(nodes)
    per_node = environ.get("SLURM_TASKS_PER_NODE") or environ.get("SLURM_JOB_CPUS_PER_NODE")
    counts = expand_slurm_counts(per_node) if per_node else [1] * len(hosts)
    if len(counts) != len(hosts):
        raise ValueError("SLURM_TASKS_PER_NODE=%s lists %d nodes but SLURM_JOB_NODELIST=%s has "
                         "%d" % (per_node, len(counts), nodes, len(hosts)))
    return [HostSlots(h, n) for h, n in zip(hosts, counts)]
