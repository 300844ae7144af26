"""What a crash of an MXNet rank looks like to the job.

Note [MXNet's segfault logger]: libmxnet installs a SIGSEGV handler when it loads (unless one
is installed already) that prints "Segmentation fault: 11" and a C++ stack, building strings on
the heap, and then calls exit(). Neither is safe in a signal handler. After a fault inside the
allocator the handler can block forever on the allocator's lock, and exit() runs atexit work
and static destructors while the process's other threads (Perseus's engine among them) run
on. The rank then neither works nor dies, and the others wait for it until their stall
timeout. Where it does exit, it exits with status 255, so the launcher reports an error exit
instead of the signal.

perseus.mxnet therefore puts the default action back and enables Python's faulthandler, unless
the program enabled faulthandler itself. faulthandler writes the Python stack of every thread
with only async-signal-safe calls, then re-raises the signal: the process dies of SIGSEGV, and
perseusrun, mpirun or srun report which rank was killed by which signal."""
import faulthandler
import signal


def restore_default_crash():
    if faulthandler.is_enabled():
        return  # the program chose its own crash report
    try:
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)
    except ValueError:  # imported off the main thread, where Python sets no handlers
        return
    faulthandler.enable()
