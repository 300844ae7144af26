"""Every option of horovodrun 0.28.1 (horovod/runner/launch.py, parse_args) is accepted by
perseusrun: mapped onto Perseus, or reported as having no effect. The table below is
horovodrun's option table, spelling for spelling, with a sample value for those that take one;
--check-build and --version end the program and are checked by running perseusrun."""

import pytest

from perseus_test_support import perseusrun
from perseus.runner.args import parse_args

pytestmark = pytest.mark.timeout(120)

# (option strings of one horovodrun argument, sample values): horovodrun 0.28.1 parse_args.
HOROVODRUN_0_28_1 = [
    (("-np", "--num-proc"), ["2"]),
    (("--disable-cache",), []),
    (("--start-timeout",), ["30"]),
    (("--network-interfaces",), ["lo"]),
    (("--network-interface",), ["lo"]),
    (("--output-filename",), ["/tmp/out"]),
    (("--verbose",), []),
    (("--config-file",), None),  # needs a file: checked in test_config_file below
    (("-p", "--ssh-port"), ["22"]),
    (("-i", "--ssh-identity-file"), ["/tmp/key"]),
    (("--fusion-threshold-mb",), ["64"]),
    (("--cycle-time-ms",), ["1.5"]),
    (("--cache-capacity",), ["1024"]),
    (("--hierarchical-allreduce",), []),
    (("--no-hierarchical-allreduce",), []),
    (("--hierarchical-allgather",), []),
    (("--no-hierarchical-allgather",), []),
    (("--autotune",), []),
    (("--no-autotune",), []),
    (("--autotune-log-file",), ["/tmp/autotune.csv"]),
    (("--autotune-warmup-samples",), ["3"]),
    (("--autotune-steps-per-sample",), ["10"]),
    (("--autotune-bayes-opt-max-samples",), ["20"]),
    (("--autotune-gaussian-process-noise",), ["0.8"]),
    (("--min-np", "--min-num-proc"), ["1"]),
    (("--max-np", "--max-num-proc"), ["4"]),
    (("--slots-per-host",), ["2"]),
    (("--elastic-timeout",), ["600"]),
    (("--reset-limit",), ["3"]),
    (("--blacklist-cooldown-range",), ["10", "100"]),
    (("--timeline-filename",), ["/tmp/timeline.json"]),
    (("--timeline-mark-cycles",), []),
    (("--no-timeline-mark-cycles",), []),
    (("--no-stall-check",), []),
    (("--stall-check",), []),
    (("--stall-check-warning-time-seconds",), ["60"]),
    (("--stall-check-shutdown-time-seconds",), ["0"]),
    (("--mpi-threads-disable",), []),
    (("--no-mpi-threads-disable",), []),
    (("--mpi-args",), ["--map-by ppr:6:node"]),
    (("--tcp",), []),
    (("--binding-args",), ["--bind-to core"]),
    (("--num-nccl-streams",), ["2"]),
    (("--thread-affinity",), ["0"]),
    (("--gloo-timeout-seconds",), ["30"]),
    (("--log-level",), ["WARNING"]),
    (("--log-with-timestamp",), []),
    (("--log-without-timestamp",), []),
    (("-prefix-timestamp", "--prefix-output-with-timestamp"), []),
    (("--log-hide-timestamp",), []),
    (("--no-log-hide-timestamp",), []),
    (("-H", "--hosts"), ["localhost:2"]),
    (("-hostfile", "--hostfile"), ["/tmp/hostfile"]),
    (("--host-discovery-script",), ["/tmp/discover.sh"]),
    (("--gloo",), []),
    (("--mpi",), []),
]
# Refused with a message saying what to use instead (LSF's jsrun is not supported).
REFUSED = ("--jsrun",)
EXITS = (("-cb", "--check-build"), ("-v", "--version"))

CASES = [(flag, values) for flags, values in HOROVODRUN_0_28_1 if values is not None
         for flag in flags]


@pytest.mark.parametrize("flag, values", CASES, ids=[c[0] for c in CASES])
def test_every_horovodrun_flag_is_accepted(flag, values, capsys):
    argv = [flag] + values
    if flag not in ("-np", "--num-proc"):
        argv = ["-np", "2"] + argv
    args = parse_args(argv + ["python", "train.py"])
    assert args.command == ["python", "train.py"]
    assert "error" not in capsys.readouterr().err


def test_no_effect_flags_say_so(capsys):
    parse_args(["-np", "2", "--prefix-output-with-timestamp", "--cycle-time-ms", "5", "python"])
    err = capsys.readouterr().err
    assert "--prefix-output-with-timestamp has no effect in Perseus" in err
    assert "--cycle-time-ms has no effect in Perseus" in err


def test_config_file(tmp_path, capsys):
    config = tmp_path / "hvd.yaml"
    config.write_text("params:\n  fusion_threshold_mb: 32\n")
    args = parse_args(["-np", "2", "--config-file", str(config), "python"])
    assert args.fusion_threshold_mb == 32


@pytest.mark.parametrize("flag", [f for flags in EXITS for f in flags] + list(REFUSED))
def test_flags_that_end_the_program(flag):
    r = perseusrun([flag] if flag != "--jsrun" else ["-np", 2, flag, "python"])
    if flag == "--jsrun":
        assert r.returncode == 2 and "jsrun" in r.stderr and "not supported" in r.stderr
    else:
        assert r.returncode == 0, r.stderr
