"""What every reliability worker shares: its arguments (--tag marks the processes of one job,
--results names the folder where ranks write what happened), the result records, markers
(files whose content is a time.time() stamp, read by the test) and a deterministic SIGKILL.

Results go to files, not stdout: a remote rank's output travels over ssh, which perseusrun
closes as soon as it stops the job, while the file system is shared by every namespace."""

import argparse
import json
import os
import signal
import threading
import time

RANK = int(os.environ.get("PERSEUS_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
SIZE = int(os.environ.get("PERSEUS_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))


def parse(extra=None):
    p = argparse.ArgumentParser()
    p.add_argument("--tag", required=True)
    p.add_argument("--results", required=True)
    if extra:
        extra(p)
    return p.parse_args()


class Results:
    def __init__(self, folder):
        self.folder = folder

    def report(self, **record):
        record.setdefault("rank", RANK)
        record.setdefault("time", time.time())
        record.setdefault("host", os.environ.get("PERSEUS_HOSTNAME", ""))
        with open(os.path.join(self.folder, "rank%d.json" % RANK), "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def mark(self, name):
        """Creates results/<name> holding the time, atomically (written, then renamed)."""
        path = os.path.join(self.folder, name)
        tmp = path + ".%d.tmp" % os.getpid()
        with open(tmp, "w") as f:
            f.write(repr(time.time()))
        os.replace(tmp, path)

    def raised(self, exc, **extra):
        self.report(outcome="raised", type=type(exc).__name__,
                    classes=[c.__name__ for c in type(exc).__mro__], message=str(exc)[:2000],
                    **extra)


def hold_sigterm():
    """perseusrun stops the other ranks with SIGTERM as soon as one fails, then SIGKILL 3 s
    later. A rank under test keeps running through SIGTERM so that it can raise (and report)
    the error the core gives it; SIGKILL still ends it."""
    signal.signal(signal.SIGTERM, lambda *_: None)


def kill_self_later(results, delay_s, marker="killed"):
    """SIGKILLs this process after `delay_s` seconds, from a thread: wherever the main thread
    is at that moment (rendezvous, negotiation, inside a transfer). The marker holds the time
    of the kill."""
    def fire():
        time.sleep(delay_s)
        results.mark(marker)
        os.kill(os.getpid(), signal.SIGKILL)
    t = threading.Thread(target=fire, daemon=True)
    t.start()
    return t
