"""Perseus behaves as Horovod 0.28 where a Horovod program or launch line relies on it, and
docs/horovod-compatibility.md says exactly what differs. The table is checked here against the
modules' real exports, perseusrun's parser, the HOROVOD_* tables and Horovod's own names
(horovod_names.py), so it cannot drift."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from horovod_names import HOROVOD_ENV, HOROVODRUN_FLAGS, MXNET, TORCH
from perseus_test_support import REPO, job_env, perseusrun, require_mxnet, run_worker

pytestmark = pytest.mark.timeout(200)

DOC = REPO / "docs" / "horovod-compatibility.md"


def _table(section):
    """{name: (status, notes)} of the table under '## <section>'."""
    text = DOC.read_text()
    start = text.index("## " + section + "\n")
    end = text.find("\n## ", start + 1)
    rows = {}
    for line in text[start:end if end > 0 else None].splitlines():
        m = re.match(r"\| `([^`]+)` \| (yes|differs|no) \|(.*)\|$", line)
        if m:
            assert m.group(1) not in rows, "%s listed twice in %s" % (m.group(1), section)
            rows[m.group(1)] = (m.group(2), m.group(3).strip())
    return rows


def _check_module_table(section, horovod_names, module):
    rows = _table(section)
    missing = [n for n in horovod_names if n not in rows]
    assert not missing, "%s: Horovod names without a row: %s" % (section, missing)
    extra = [n for n in rows if n not in horovod_names]
    assert not extra, "%s: rows for names Horovod does not export: %s" % (section, extra)
    for name, (status, notes) in rows.items():
        assert hasattr(module, name), "%s.%s: the table says %s but it is not exported" % (
            module.__name__, name, status)
        if status != "yes":
            assert notes.strip(), "%s.%s is '%s' without saying why" % (section, name, status)


def test_table_matches_perseus_torch_exports():
    torch_module = pytest.importorskip("perseus.torch")
    _check_module_table("horovod.torch", TORCH, torch_module)
    for name in ("run", "State", "ObjectState", "TorchState", "ElasticSampler"):
        assert hasattr(torch_module.elastic, name), "hvd.elastic.%s is missing" % name


def test_table_matches_perseus_mxnet_exports():
    require_mxnet()
    import perseus.mxnet as mx_module
    _check_module_table("horovod.mxnet", MXNET, mx_module)


def test_table_lists_every_horovodrun_flag_and_perseusrun_takes_them():
    from perseus.runner.args import build_parser
    rows = _table("horovodrun flags")
    assert sorted(rows) == sorted(HOROVODRUN_FLAGS), set(rows) ^ set(HOROVODRUN_FLAGS)
    spellings = {s for a in build_parser()._actions for s in a.option_strings}
    missing = [f for f in HOROVODRUN_FLAGS if f not in spellings]
    assert not missing, "perseusrun lacks horovodrun flags: %s" % missing


@pytest.mark.parametrize("flag", sorted(f for f in HOROVODRUN_FLAGS
                                        if f not in ("-v", "--version", "-cb", "--check-build",
                                                     "--config-file")))
def test_perseusrun_parses_each_horovodrun_flag(flag, capsys):
    """Never an 'unrecognized arguments' exit: parsed, or refused with the table's reason."""
    from perseus.runner.args import parse_args
    value = HOROVODRUN_FLAGS[flag]
    if value is None:
        given = [flag]
    elif value.startswith("-"):  # as with horovodrun: --mpi-args="-x A"
        given = ["%s=%s" % (flag, value)]
    else:
        given = [flag] + value.split()
    argv = ["-np", "1"] + given
    if flag in ("-np", "--num-proc"):
        argv = [flag, "1"]
    argv += ["true"]
    status, notes = _table("horovodrun flags")[flag]
    if status == "no":
        with pytest.raises(SystemExit) as e:
            parse_args(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "not supported" in err and "unrecognized" not in err, err
        return
    args = parse_args(argv)
    assert args.command == ["true"]
    err = capsys.readouterr().err
    if "No effect (logged)" in notes:
        assert "has no effect" in err, (flag, err)


def test_table_lists_every_horovod_variable_and_each_is_handled():
    from perseus.common import horovod_env
    rows = _table("Environment variables")
    assert sorted(rows) == sorted(HOROVOD_ENV), set(rows) ^ set(HOROVOD_ENV)
    for name, (status, notes) in rows.items():
        handled = (name in horovod_env.TRANSLATED or name in horovod_env.NO_EFFECT
                   or name in horovod_env.TOPOLOGY)
        assert handled, "%s is in the table but Perseus neither honours nor reports it" % name
        if "No effect" in notes:
            assert name in horovod_env.NO_EFFECT, name
        elif status == "yes" and name not in horovod_env.TOPOLOGY:
            assert name in horovod_env.TRANSLATED, name


def test_horovod_variables_translate_and_unknown_perseus_ones_name_the_closest():
    from perseus.common import horovod_env
    updates, ignored = horovod_env.translate({
        "HOROVOD_CPU_OPERATIONS": "GLOO", "HOROVOD_LOG_LEVEL": "FATAL",
        "HOROVOD_STALL_CHECK_DISABLE": "1", "HOROVOD_GLOO_TIMEOUT_SECONDS": "7",
        "HOROVOD_CYCLE_TIME": "5", "HOROVOD_START_TIMEOUT": "9",
        "HOROVOD_FUSION_THRESHOLD": "1024", "PERSEUS_FUSION_THRESHOLD": "2048"})
    assert updates["PERSEUS_CPU_OPERATIONS"] == "tcp"
    assert updates["PERSEUS_LOG_LEVEL"] == "error"
    assert updates["PERSEUS_STALL_WARNING"] == "1e9"
    assert updates["PERSEUS_TIMEOUT"] == "7.0" and updates["PERSEUS_START_TIMEOUT"] == "9.0"
    assert "PERSEUS_FUSION_THRESHOLD" not in updates  # the explicit PERSEUS_* value wins
    assert [n for n, _ in ignored] == ["HOROVOD_CYCLE_TIME"]
    unknown = horovod_env.unknown_perseus(
        {"PERSEUS_FUSION_THRESHOLDD": "1", "PERSEUS_TIMEOUT": "3", "PERSEUS_ALLREDUCE_MODE": "1"},
        ["PERSEUS_FUSION_THRESHOLD", "PERSEUS_TIMEOUT"])
    assert unknown == [("PERSEUS_FUSION_THRESHOLDD", "PERSEUS_FUSION_THRESHOLD")]


def test_horovodrun_own_gloo_settings_are_not_a_request():
    """horovodrun sets HOROVOD_CONTROLLER/CPU_OPERATIONS=gloo for every worker: under it they
    neither force TCP within a host nor get reported; set by a user, they still do."""
    from perseus.common import horovod_env
    gloo = {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_IFACE": "lo"}
    updates, ignored = horovod_env.translate(dict(
        gloo, HOROVOD_RANK="0", HOROVOD_GLOO_RENDEZVOUS_ADDR="127.0.0.1"))
    assert updates == {"PERSEUS_IFACE": "lo"} and ignored == [], (updates, ignored)
    updates, ignored = horovod_env.translate(gloo)
    assert updates["PERSEUS_CPU_OPERATIONS"] == "tcp"
    assert [name for name, _ in ignored] == ["HOROVOD_CONTROLLER"]


@pytest.mark.parametrize("np", [2, 3])
def test_torch_behaves_as_horovod(np):
    out = run_worker(np, "torch_conformance.py").stdout
    assert out.count("PASS check_") == np * 14, out


def test_horovod_launch_line_runs_and_reports_what_has_no_effect(tmp_path):
    """A horovodrun line with its tuning flags, HOROVOD_* variables and a typo'd PERSEUS_*
    variable: the job runs, the flags are honoured or logged, the typo names the right one."""
    config = tmp_path / "hvd.yaml"
    config.write_text("params:\n  cycle_time_ms: 2\n  cache_capacity: 512\n"
                      "timeline:\n  mark_cycles: true\n")
    script = tmp_path / "show.py"
    script.write_text(
        "import os, perseus.torch as hvd\n"
        "hvd.init()\n"
        "print('ENV', os.environ.get('PERSEUS_CACHE_CAPACITY'),"
        " os.environ.get('PERSEUS_NUM_STREAMS'), os.environ.get('PERSEUS_TIMEOUT'),"
        " os.environ.get('PERSEUS_CPU_OPERATIONS'), os.environ.get('PERSEUS_STALL_WARNING'),"
        " os.environ.get('PERSEUS_TIMELINE_MARK_CYCLES'), os.environ['HOROVOD_RANK'])\n")
    env = job_env(HOROVOD_AUTOTUNE="1", PERSEUS_FUSION_THRESHOLDD="1")
    result = perseusrun(["-np", "2", "--config-file", config, "--gloo", "--tcp",
                         "--num-nccl-streams", "2", "--gloo-timeout-seconds", "25",
                         "--no-stall-check", "--autotune", "--log-level", "WARNING",
                         "-prefix-timestamp", "--disable-cache", sys.executable, script],
                        env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    out, err = result.stdout, result.stderr
    for rank in (0, 1):
        assert "ENV 512 2 25.0 tcp 1e9 1 %d" % rank in out, out
    for flag in ("--cycle-time-ms", "--autotune", "--prefix-output-with-timestamp",
                 "--disable-cache"):
        assert "%s has no effect in Perseus" % flag in err, err
    assert "HOROVOD_AUTOTUNE=1 has no effect in Perseus" in err, err
    assert err.count("HOROVOD_AUTOTUNE=1 has no effect") == 1  # rank 0 only
    assert "PERSEUS_FUSION_THRESHOLDD is not a Perseus variable" in err
    assert "did you mean PERSEUS_FUSION_THRESHOLD?" in err


def test_perseusrun_version_and_elastic_flags_alone():
    result = perseusrun(["--version"])
    assert result.returncode == 0 and "Horovod 0.28 API" in result.stdout
    result = perseusrun(["-np", "1", "--reset-limit", "1", "true"])
    assert result.returncode == 0, result.stderr
    assert "--reset-limit has no effect without elastic mode" in result.stderr


@pytest.mark.parametrize("np", [2, 3])
def test_mxnet_behaves_as_horovod(np):
    require_mxnet()
    out = run_worker(np, "mx_conformance.py").stdout
    assert out.count("PASS check_") == np * 10, out


@pytest.mark.skipif(__import__("shutil").which("mpirun") is None, reason="needs Open MPI")
def test_mpi_enabled_means_mpi_is_in_use():
    """As Horovod, whose MPI controller runs wherever an MPI launcher started the ranks: true
    under mpirun (plain, or through perseusrun --mpi as horovodrun's MPI mode), false under
    perseusrun's own launch (check_build_queries) even where libperseus was built with MPI."""
    code = ("from perseus.common import basics as hvd; hvd.init(); "
            "import sys; sys.stdout.write('MPI %s %s\\n' % (hvd.mpi_built(), hvd.mpi_enabled()))")
    env = job_env()
    plain = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"] +
                           [a for k in ("PYTHONPATH", "PERSEUS_BUILD_DIR") if k in env
                            for a in ("-x", k)] + [sys.executable, "-c", code],
                           env=env, capture_output=True, text=True, timeout=90)
    assert plain.returncode == 0, plain.stderr
    if "MPI False" in plain.stdout:
        pytest.skip("libperseus was built without MPI")
    assert plain.stdout.count("MPI True True") == 2, plain.stdout
    wrapped = perseusrun(["--mpi", "-np", "2", sys.executable, "-c", code])
    assert wrapped.returncode == 0, wrapped.stderr
    assert wrapped.stdout.count("MPI True True") == 2, wrapped.stdout
    own = perseusrun(["-np", "2", sys.executable, "-c", code])
    assert own.returncode == 0, own.stderr
    assert own.stdout.count("MPI True False") == 2, own.stdout
