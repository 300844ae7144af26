"""The rendezvous store keys of an elastic job: what the driver (perseus/runner/elastic/driver.py)
publishes and what its workers (perseus/common/elastic/worker.py) read and report. Both import
this module, so the two sides cannot drift apart.

  elastic/epoch                      newest published epoch (decimal); workers poll it
  elastic/stop                       set when the job ends: waiting workers exit
  elastic/<E>/assign/<worker id>     "rank=.. size=.. local_rank=.. local_size=.. cross_rank=..
                                      cross_size=.. host=.." of one member of epoch E
  elastic/<E>/joined/<worker id>     set by the member when it starts epoch E's rendezvous
  elastic/<E>/failed                 counter: members that saw epoch E fail
  elastic/<E>/failed_by/<worker id>  set by each member that saw epoch E fail
  elastic/<E>/unresponsive/<rank>    counter: members whose collective of epoch E timed out
                                      (PERSEUS_TIMEOUT) waiting for that rank
  elastic/ready/<worker id>          "1" once a started worker waits for its first membership
                                      (the driver publishes a new worker only then); "0" set
                                      by the driver before it starts one; also set
                                      under a spare's id once the spare has warmed up
  elastic/spare/<spare id>           "<worker id> <first epoch>": the driver gives a spare worker
                                      (perseusrun --spare-workers) the slot it takes over
  elastic/<E>/perseus/...            epoch E's own rendezvous (PERSEUS_STORE_PREFIX); the
                                      driver sets elastic/<E>/perseus/abort when it gives up on
                                      E, which ends a rendezvous still waiting for a lost member

A worker id is "<host>:<local slot>", stable for the life of the worker."""

EPOCH = "elastic/epoch"
# The environment variable that gives a started worker the first epoch it may join.
FIRST_EPOCH_ENV = "PERSEUS_ELASTIC_FIRST_EPOCH"
STOP = "elastic/stop"
# The environment variable that makes a started process a spare worker (its spare id): it has
# no slot until the driver gives it one (spare()).
SPARE_ENV = "PERSEUS_ELASTIC_SPARE"


def epoch_prefix(epoch):
    return "elastic/%d/" % epoch


def assignment(epoch, worker_id):
    return "elastic/%d/assign/%s" % (epoch, worker_id)


def joined(epoch, worker_id):
    return "elastic/%d/joined/%s" % (epoch, worker_id)


def ready(worker_id):
    return "elastic/ready/%s" % worker_id


def spare(spare_id):
    return "elastic/spare/%s" % spare_id


def failed(epoch):
    return "elastic/%d/failed" % epoch


def failed_by(epoch, worker_id):
    return "elastic/%d/failed_by/%s" % (epoch, worker_id)


def unresponsive(epoch, rank):
    return "elastic/%d/unresponsive/%d" % (epoch, rank)


def abort(epoch):
    return epoch_prefix(epoch) + "perseus/abort"


def encode_assignment(slot):
    return ("rank=%d size=%d local_rank=%d local_size=%d cross_rank=%d cross_size=%d host=%s"
            % (slot.rank, slot.size, slot.local_rank, slot.local_size, slot.cross_rank,
               slot.cross_size, slot.host)).encode()
