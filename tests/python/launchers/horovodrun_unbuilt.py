"""horovodrun 0.28.1's command line, run from Horovod's source distribution (scripts/setup.sh
unpacks it; PERSEUS_HOROVOD_SRC): it parses the flags, assigns the slots, starts its HTTP
rendezvous server and starts every worker with its environment, exactly as the installed
horovodrun. One check is answered yes: whether Horovod compiled a framework extension with
Gloo (or MPI), which horovodrun's Gloo (or MPI) mode asks first. Compiling one takes about 30 minutes, and the
workers run Perseus, not that extension. tests/acceptance/horovodrun_job.sh runs a fully
built horovodrun."""
import sys

import horovod.runner.launch as launch

if __name__ == "__main__":  # horovodrun's safe_shell_exec re-imports this under spawn
    launch.gloo_built = launch.mpi_built = lambda verbose=False: True
    sys.exit(launch.run_commandline())
