"""perseusrun in elastic mode: the store, the job environment and the driver's lifetime
(runner/elastic/driver.py runs the memberships). Everything started is ended on the way out:
workers, the store, and every shared-memory segment of every epoch."""

import os
import secrets
import signal

from perseus.runner import env as envmod
from perseus.runner import hosts as hostmod
from perseus.runner.discovery import FixedDiscovery, ScriptDiscovery
from perseus.runner.elastic.driver import ElasticDriver, ElasticError, _log
from perseus.runner.guard import Guard
from perseus.runner.process import OutputSink


def _discovery(args):
    if args.host_discovery_script:
        return ScriptDiscovery(args.host_discovery_script, args.slots_per_host or 1)
    if args.hostfile:
        return FixedDiscovery(hostmod.parse_hostfile(args.hostfile))
    if args.hosts:
        return FixedDiscovery(hostmod.parse_hosts(args.hosts))
    return FixedDiscovery([hostmod.HostSlots("localhost", args.max_np or args.np)])


def _controller_address(discovery, args):
    if args.network_interface:
        return "0.0.0.0", hostmod.interface_address(args.network_interface)
    try:
        hosts = list(discovery.find())
    except RuntimeError:
        hosts = []
    bad = hostmod.unresolvable(hosts)
    remote = [h for h in hosts if not hostmod.is_local(h) and h not in bad]
    if not remote:
        return "127.0.0.1", "127.0.0.1"
    return "0.0.0.0", hostmod.address_reaching(remote[0])


def run_elastic(args, start_store, shm_names, raise_interrupt, interrupted_type, stop_signals):
    from perseus import _core
    discovery = _discovery(args)
    bind, address = _controller_address(discovery, args)
    secret = secrets.token_hex(32)
    job_id = secrets.token_hex(8)
    server = start_store(bind, secret)
    store = _core.StoreClient(address if bind != "0.0.0.0" else "127.0.0.1", server.port,
                              secret, 10.0)
    max_local = args.max_np or args.np or 1
    base_env = envmod.job_env(os.environ, args, max(1, min(max_local, os.cpu_count() or 1)))
    for name in ("PERSEUS_JOB_ID", "PERSEUS_STORE_PREFIX"):  # set per epoch by the workers
        base_env.pop(name, None)
    base_env.update({"PERSEUS_CONTROLLER_ADDR": address,
                     "PERSEUS_CONTROLLER_PORT": str(server.port),
                     "PERSEUS_SECRET": secret,
                     "PERSEUS_ELASTIC": "1",
                     "HOROVOD_ELASTIC": "1",
                     "PERSEUS_ELASTIC_JOB_ID": job_id})
    start_timeout = float(args.start_timeout or os.environ.get("PERSEUS_START_TIMEOUT") or 60)
    sink = OutputSink(args.output_filename)
    guard = Guard()
    driver = ElasticDriver(args, discovery, store, base_env, sink, start_timeout, guard)
    base_env["PERSEUS_ELASTIC_TIMEOUT"] = str(driver.elastic_timeout)
    previous = {s: signal.signal(s, raise_interrupt) for s in stop_signals}
    try:
        status = driver.run()
    except ElasticError as e:
        _log("elastic job failed: %s" % e)
        status = 1
    except interrupted_type as e:
        for s in previous:
            signal.signal(s, signal.SIG_IGN)
        _log("received %s; stopping all workers." % signal.Signals(e.signum).name)
        status = 128 + e.signum
    finally:
        for s in previous:
            signal.signal(s, signal.SIG_IGN)
        driver.stop()
        guard.close()
        sink.close()
        store.close()
        server.stop()
        for name in shm_names(job_id):  # left by workers killed in any epoch
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status
