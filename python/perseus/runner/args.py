"""perseusrun's command line. Every tuning flag becomes a PERSEUS_* variable (env.py).

Every horovodrun flag is accepted (docs/horovod-compatibility.md): those with a Perseus meaning
set it, the others are reported on stderr as having no effect, with the reason; jsrun, which
Perseus does not have, stops with an error that says so. The elastic flags (--min-np, --max-np,
--host-discovery-script) start elastic mode (runner/elastic/driver.py)."""

import argparse
import os
import sys

from perseus.runner import horovod_flags

_EPILOG = """\
examples:
  perseusrun -np 4 python train.py
  perseusrun -np 8 -H host1:4,host2:4 -p 2222 python train.py
  perseusrun -np 2 --mpi python train.py           # hands the job to mpirun
  mpirun -np 4 python train.py                     # also works: ranks read OMPI_* variables
  perseusrun --check-build
  salloc -N 2 --ntasks-per-node 4 perseusrun python train.py   # hosts and -np from Slurm
  perseusrun -np 4 --min-np 2 --max-np 8 --host-discovery-script ./hosts.sh python train.py

Every rank's output is prefixed '[rank]<stdout>:' or '[rank]<stderr>:'. When a rank fails,
the others are stopped (SIGTERM, then SIGKILL) and perseusrun exits with the failed rank's code
(128+N for signal N). Environment variables are passed through to every rank.
"""


class _Parser(argparse.ArgumentParser):
    """A usage error is the error and one hint line (as git prints them), not the usage block
    of every option above it."""

    def error(self, message):
        self.exit(2, "%s: error: %s\nhint: 'perseusrun --help' lists the options\n"
                  % (self.prog, message))


def build_parser():
    p = _Parser(
        prog="perseusrun", epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Launch a Perseus (Horovod-compatible) distributed job.")
    p.add_argument("-np", "--num-proc", "--np", type=int, dest="np",
                   help="Number of processes (ranks) to start.")
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", help="host1:slots,host2:slots (default: localhost:NP).")
    hosts.add_argument("-hostfile", "--hostfile",
                       help="MPI machine file: 'host slots=N' per line, '#' comments.")
    p.add_argument("-p", "--ssh-port", type=int, help="SSH port of the remote hosts.")
    p.add_argument("-i", "--ssh-identity-file", help="SSH private key for the remote hosts.")
    controller = p.add_mutually_exclusive_group()
    controller.add_argument("--mpi", action="store_true",
                            help="Start the ranks with mpirun (Open MPI) instead of directly.")
    controller.add_argument("--gloo", action="store_true",
                            help="Start the ranks directly with Perseus's own rendezvous and "
                                 "TCP/shared-memory planes (the default; Horovod's Gloo mode).")
    controller.add_argument("--jsrun", action="store_true",
                            help="Not supported (LSF's jsrun); start the job with -H/--hostfile.")
    p.add_argument("--mpi-args", default="",
                   help="Extra arguments for mpirun, as one string (with --mpi).")
    p.add_argument("--output-filename", metavar="DIR",
                   help="Also write each rank's output to DIR/rank.<N>/{stdout,stderr}.")
    p.add_argument("--verbose", action="store_true",
                   help="Print how ranks are placed and started (never the secret).")
    p.add_argument("-cb", "--check-build", action="store_true",
                   help="Print what libperseus was built with and which frameworks import.")
    p.add_argument("--params", action="store_true",
                   help="Print every PERSEUS_* setting with its value, default and meaning.")

    t = p.add_argument_group("tuning (each sets a PERSEUS_* variable for every rank)")
    t.add_argument("--fusion-threshold-mb", type=float,
                   help="Fusion buffer size in MiB (PERSEUS_FUSION_THRESHOLD, bytes); 0 disables.")
    t.add_argument("--cache-capacity", type=int,
                   help="Response cache entries (PERSEUS_CACHE_CAPACITY); 0 disables.")
    hier = t.add_mutually_exclusive_group()
    hier.add_argument("--hierarchical-allreduce", dest="hierarchical", action="store_const",
                      const="1", help="Reduce within hosts, then across (PERSEUS_HIERARCHICAL_ALLREDUCE=1).")
    hier.add_argument("--no-hierarchical-allreduce", dest="hierarchical", action="store_const",
                      const="0", help="Never use hierarchical allreduce.")
    t.add_argument("--bind-to", choices=["core", "none"], type=str.lower,
                   help="core (default): each rank binds its threads to its share of the "
                        "host's cores, as mpirun binds ranks; none: the scheduler places them "
                        "(PERSEUS_BIND_TO).")
    t.add_argument("--timeline-filename",
                   help="Chrome-trace timeline path (PERSEUS_TIMELINE; one file per rank).")
    t.add_argument("--log-level",
                   choices=["trace", "debug", "info", "warning", "error", "fatal", "off"],
                   type=str.lower, help="Core log level (PERSEUS_LOG_LEVEL); Horovod's FATAL "
                                        "means error.")
    t.add_argument("--start-timeout", type=float,
                   help="Seconds rendezvous waits for every rank (PERSEUS_START_TIMEOUT).")
    t.add_argument("--timeout", type=float,
                   help="Seconds before a lost peer or stuck transfer fails the job (PERSEUS_TIMEOUT).")
    t.add_argument("--network-interface", "--network-interfaces", dest="network_interface",
                   help="Interface name or address to use (PERSEUS_IFACE).")
    t.add_argument("--stall-check-warning-time-seconds", type=float,
                   help="PERSEUS_STALL_WARNING.")
    t.add_argument("--stall-check-shutdown-time-seconds", type=float,
                   help="PERSEUS_STALL_SHUTDOWN.")
    horovod_flags.add_arguments(p)
    p.add_argument("-v", "--version", action="version",
                   version="perseusrun %s (Horovod 0.28 API)" % _version())
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="The program and its arguments (a leading '--' is allowed).")
    return p


def _version():
    from perseus import __version__
    return __version__


def parse_args(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.config_file:
        horovod_flags.apply_config_file(parser, args, argv)
    for message in horovod_flags.resolve(parser, args):
        print("perseusrun: %s" % message, file=sys.stderr, flush=True)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not (args.check_build or args.params):
        if not args.command:
            parser.error("no command given; usage: perseusrun -np N [options] command args...")
        if args.np is None and not (os.environ.get("SLURM_JOB_ID") and not args.hosts
                                    and not args.hostfile):
            parser.error("-np is required (outside a Slurm allocation, whose tasks it "
                         "defaults to)")
        if args.np is not None and args.np < 1:
            parser.error("-np must be >= 1")
    return args
