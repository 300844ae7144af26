"""The launcher guard: a small process that ends perseusrun's local process groups when
perseusrun itself dies without cleaning up (SIGKILL, the OOM killer, a crash).

perseusrun writes the process-group id of every child it starts (a local rank, an ssh client,
mpirun) to the guard's stdin, and "-<pgid>" once that child is reaped and its group is killed.
The guard holds the only read end of that pipe: when perseusrun exits for any reason the pipe
reaches EOF, and unless perseusrun said "done" first, the guard sends SIGTERM to every group
still listed, then SIGKILL after a grace period. A pipe is used rather than the parent-death
signal (prctl PR_SET_PDEATHSIG) because that signal reaches only the direct child, fires when
the *thread* that forked it exits, and has to be set between fork and exec, which Python's
subprocess allows only through preexec_fn, unsafe with the output pump threads running. The
guard runs in a session of its own, so a signal to perseusrun's process group or terminal does
not end it before it has done its work.

Run as a script (python guard.py), not as perseus.runner.guard, so that it starts without
importing the package."""

import os
import signal
import subprocess
import sys
import time

KILL_GRACE_S = 3.0


class Guard:
    """perseusrun's side: starts the guard process and tells it what to end."""

    def __init__(self):
        self._proc = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__)], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, start_new_session=True)

    def _send(self, line):
        try:
            self._proc.stdin.write(b"%s\n" % line.encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the guard is gone: nothing to tell it, the normal cleanup still runs

    def watch(self, pgid):
        self._send("%d" % pgid)

    def forget(self, pgid):
        self._send("-%d" % pgid)

    def close(self):
        """A clean end: the guard exits without signalling anything."""
        self._send("done")
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()


def _alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _end_groups(groups):
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline and any(_alive(g) for g in groups):
        time.sleep(0.05)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main():
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)  # ends only through its pipe
    groups = set()
    for line in sys.stdin.buffer:
        line = line.strip()
        if line == b"done":
            return 0
        if line.startswith(b"-"):
            groups.discard(int(line[1:]))
        elif line:
            groups.add(int(line))
    if groups:
        try:
            print("perseusrun: the launcher died; stopping its %d local process group%s"
                  % (len(groups), "" if len(groups) == 1 else "s"), file=sys.stderr, flush=True)
        except OSError:
            pass  # the terminal may be gone with the launcher
        _end_groups(sorted(groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
