"""Python exceptions for perseus_status codes (include/perseus/c_api.h).

Horovod compatibility: Horovod turns every error of its core (a bad dtype, a duplicate name,
an unsupported op, a lost peer, a call before init) into `HorovodInternalError`, a RuntimeError,
at submission or in synchronize(). So every exception here is a `PerseusInternalError`, which is
`HorovodInternalError` itself: `except RuntimeError` and `except HorovodInternalError` code catch
them as they catch Horovod's. Those whose cause is an argument are ValueError too, which is what
Horovod's Python layer raises for the same arguments (and what hvd.rank() raises before init).
"""


class PerseusInternalError(RuntimeError):
    """A collective failed inside the library: a peer was lost, a transfer timed out, or the
    library hit an internal error. Equivalent of horovod.common.exceptions.HorovodInternalError."""


HorovodInternalError = PerseusInternalError


class HostsUpdatedInterrupt(RuntimeError):
    """Raised on every rank alike by State.commit() / State.check_host_updates() when the
    launcher has announced a new membership (elastic mode: hosts added or removed);
    hvd.elastic.run() catches it, resets to the new membership and re-enters the training
    function. skip_sync: this rank's state needs no sync (Perseus raises it with True; the
    ranks still sync when any of them, a new worker for one, needs it)."""

    def __init__(self, skip_sync=False):
        super().__init__()
        self.skip_sync = skip_sync


class InvalidArgumentError(PerseusInternalError, ValueError):
    """An argument is wrong on this rank: dtype, shape, root, splits, name, process set."""


class UnsupportedError(InvalidArgumentError):
    """The dtype, device or reduction is not supported by this collective."""


class DuplicateNameError(InvalidArgumentError):
    """A collective with the same name is still in flight on this rank."""


class NotInitializedError(PerseusInternalError, ValueError):
    """Called before init(): Horovod's basics raise ValueError, its collectives
    HorovodInternalError."""


class MismatchError(InvalidArgumentError):
    """Ranks disagreed on shape, dtype, op, root or process set. Horovod raises this from
    synchronize() as a RuntimeError; it is also a ValueError because the cause is an argument."""


class ShutDownError(PerseusInternalError):
    """Perseus was shut down (or a failure on another rank shut it down) while this operation
    was pending."""


class PeerLostError(PerseusInternalError):
    """A rank died or its connection broke; the message names the rank."""


class CollectiveTimeoutError(PerseusInternalError):
    """A transfer or rendezvous exceeded PERSEUS_TIMEOUT / PERSEUS_START_TIMEOUT."""


class AuthenticationError(PerseusInternalError):
    """The rendezvous store rejected the job secret (PERSEUS_SECRET differs between ranks)."""


# perseus_status -> exception class. 0 (OK) and 10 (IN_PROGRESS) never raise.
_BY_STATUS = {
    1: InvalidArgumentError,
    2: NotInitializedError,
    3: MismatchError,
    4: PeerLostError,
    5: CollectiveTimeoutError,
    6: DuplicateNameError,
    7: UnsupportedError,
    8: PerseusInternalError,
    9: ShutDownError,
    11: AuthenticationError,
}


def exception_for_status(code):
    """The exception class the extension raises for a perseus_status value."""
    return _BY_STATUS.get(int(code), PerseusInternalError)


def status_of(exc):
    """The perseus_status code of an exception raised by the extension (None if not ours)."""
    return getattr(exc, "status", None)
