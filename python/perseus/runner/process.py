"""One launched process (a local rank, an ssh session or mpirun) and its prefixed output."""

import collections
import os
import re
import signal
import subprocess
import sys
import threading

# mpirun --tag-output prefixes what it reads from each rank; a rank's line may arrive in two
# reads, so a tag can also appear in the middle of a line of mpirun's own output.
_MPI_TAG = re.compile(rb"\[\d+,(\d+)\]<(stdout|stderr)>:")


class OutputSink:
    """Writes prefixed lines to this process's stdout/stderr, whole lines at a time, and to
    DIR/rank.<N>/{stdout,stderr} with --output-filename. Called from the pump threads."""

    def __init__(self, log_dir=None):
        self._lock = threading.Lock()
        self._log_dir = log_dir
        self._files = {}

    def write(self, rank, stream, line):
        if not line.endswith(b"\n"):
            line += b"\n"
        target = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
        with self._lock:
            target.write(b"[%d]<%s>:" % (rank, stream.encode()) + line)
            target.flush()
            if self._log_dir is not None:
                self._file(rank, stream).write(line)

    def _file(self, rank, stream):
        key = (rank, stream)
        if key not in self._files:
            folder = os.path.join(self._log_dir, "rank.%d" % rank)
            os.makedirs(folder, exist_ok=True)
            self._files[key] = open(os.path.join(folder, stream), "ab", buffering=0)
        return self._files[key]

    def close(self):
        with self._lock:
            for f in self._files.values():
                f.close()
            self._files.clear()


class LaunchedProcess:
    """A child in its own session (so one killpg reaches everything it started). Its output is
    pumped by two threads; the last stderr lines are kept for the failure report.

    rank: the rank whose prefix the output gets, or None for mpirun, whose --tag-output
    prefixes are rewritten to ours. stdin_data: written to stdin, which then stays open (an
    ssh session ends its remote command when it closes). guard: the launcher guard
    (runner/guard.py) that ends the child's group if perseusrun dies without cleaning up."""

    TAIL_LINES = 20

    def __init__(self, argv, env, rank, host, sink, stdin_data=None, guard=None):
        self.rank = rank
        self.host = host
        self._sink = sink
        self.tail = collections.deque(maxlen=self.TAIL_LINES)
        self.popen = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            start_new_session=True)
        self._guard = guard
        if guard is not None:
            guard.watch(self.popen.pid)
        if stdin_data is not None:
            try:
                self.popen.stdin.write(stdin_data)
                self.popen.stdin.flush()
            except BrokenPipeError:
                pass  # ssh already exited (refused, unreachable): its code and stderr report it
        self._pumps = [threading.Thread(target=self._pump, args=(self.popen.stdout, "stdout"),
                                        daemon=True),
                       threading.Thread(target=self._pump, args=(self.popen.stderr, "stderr"),
                                        daemon=True)]
        for t in self._pumps:
            t.start()

    def _pump(self, pipe, stream):
        if self.rank is not None:
            for line in iter(pipe.readline, b""):
                self._emit(self.rank, stream, line)
        else:
            self._pump_mpirun(pipe, stream)
        pipe.close()

    def _pump_mpirun(self, pipe, stream):
        """Splits mpirun's tagged output back into whole lines per rank: a piece of a line
        waits until the rest of it, under the same tag, has arrived."""
        partial = {}  # (rank, stream) -> the start of a line
        key = (0, stream)  # untagged text belongs to the last tag seen (or is mpirun's own)

        def add(key, text):
            text = partial.pop(key, b"") + text
            if text.endswith(b"\n"):
                self._emit(key[0], key[1], text)
            elif text:
                partial[key] = text

        for line in iter(pipe.readline, b""):
            start = 0
            for m in _MPI_TAG.finditer(line):
                add(key, line[start:m.start()])
                key, start = (int(m.group(1)), m.group(2).decode()), m.end()
            add(key, line[start:])
        for (rank, tag), text in partial.items():
            self._emit(rank, tag, text + b"\n")

    def _emit(self, rank, stream, line):
        if stream == "stderr":
            self.tail.append((rank, line.rstrip(b"\n").decode(errors="replace")))
        self._sink.write(rank, stream, line)

    def poll(self):
        return self.popen.poll()

    def stopped(self):
        """True while the child (a local one: /proc) is stopped (SIGSTOP, SIGTSTP, a tracer):
        it cannot run, so it cannot report anything either."""
        try:
            with open("/proc/%d/stat" % self.popen.pid, "rb") as f:
                stat = f.read()
        except OSError:
            return False
        # "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the
        # last ')'.
        return stat[stat.rfind(b")") + 2:][:1] in (b"T", b"t")

    def signal_group(self, sig):
        """Signals the child's whole process group (ignored if it is already gone)."""
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self, timeout=2.0):
        """After exit (and the kill of its group): closes stdin, drains the output pumps."""
        if self._guard is not None:
            self._guard.forget(self.popen.pid)
        if self.popen.stdin is not None:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        for t in self._pumps:
            t.join(timeout)


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


def killed_by_signal(code):
    """True for a Popen returncode of a local rank killed by a signal (< 0), or a remote one
    whose shell reported 128+N through ssh."""
    return code is not None and (code < 0 or 128 < code < 128 + 65)


def describe_exit(code):
    """'exited with code 3' / 'was killed by signal 9 (SIGKILL)' for a Popen returncode."""
    if code is not None and code < 0:
        return "was killed by signal %d (%s)" % (-code, _signal_name(-code))
    if killed_by_signal(code):
        return "was killed by signal %d (%s; exit code %d through ssh)" % (
            code - 128, _signal_name(code - 128), code)
    return "exited with code %s" % code


def exit_status(code):
    """The shell convention: 128+N for a process killed by signal N."""
    return 128 - code if code < 0 else code
