"""Command lines for remote ranks (ssh) and for mpirun."""

import os
import shlex

_ENV_END = "__PERSEUS_ENV_END__"

# Runs on the remote host under /bin/sh. It reads the job environment from stdin (so the secret
# never appears on a command line), starts the rank in its own session, and kills that session
# when stdin reaches EOF, which happens when the ssh connection ends, e.g. when perseusrun
# stops the job or dies itself.
_REMOTE_SCRIPT = r"""
perseus_env=
while IFS= read -r perseus_line; do
  [ "$perseus_line" = "{end}" ] && break
  perseus_env="$perseus_env$perseus_line
"
done
eval "$perseus_env"
unset perseus_env perseus_line
cd {cwd} 2>/dev/null || cd
exec 3<&0
setsid {command} </dev/null 3<&- &
perseus_child=$!
# An asynchronous list reads /dev/null unless redirected: the watchdog reads the session's
# stdin through fd 3. kill falls back to the pid in case setsid has not run yet.
( while IFS= read -r perseus_ignored; do :; done
  kill -TERM -$perseus_child 2>/dev/null || kill -TERM $perseus_child 2>/dev/null
  sleep 3
  kill -KILL -$perseus_child 2>/dev/null || kill -KILL $perseus_child 2>/dev/null ) <&3 &
perseus_watch=$!
wait $perseus_child
perseus_rc=$?
kill $perseus_watch 2>/dev/null
exit $perseus_rc
"""


def ssh_argv(host, command, ssh_port=None, identity_file=None, cwd=None):
    """ssh invocation of `command` (a list) on `host`; pair it with env_block() on stdin."""
    script = _REMOTE_SCRIPT.format(end=_ENV_END, cwd=shlex.quote(cwd or os.getcwd()),
                                   command=" ".join(shlex.quote(c) for c in command))
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
    if ssh_port:
        argv += ["-p", str(ssh_port)]
    if identity_file:
        argv += ["-i", identity_file]
    argv += [host, "exec /bin/sh -c " + shlex.quote(script)]
    return argv


def env_block(env):
    """The job environment as shell 'export' lines, terminated by the end marker."""
    lines = ["export %s=%s" % (k, shlex.quote(v)) for k, v in sorted(env.items())
             if k.replace("_", "a").isalnum() and not k[0].isdigit()]
    return ("\n".join(lines) + "\n" + _ENV_END + "\n").encode()


def mpirun_argv(command, hosts, num_proc, env_names, ssh_port=None, identity_file=None,
                extra_args=""):
    """Open MPI's mpirun for the job. Variables travel by name (-x NAME), so values, the
    secret included, stay off the command line."""
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--tag-output",
            "-np", str(num_proc), "-H", ",".join("%s:%d" % (h.host, h.slots) for h in hosts),
            "-bind-to", "none", "-map-by", "slot"]
    rsh = []
    if ssh_port:
        rsh += ["-p", str(ssh_port)]
    if identity_file:
        rsh += ["-i", identity_file]
    if rsh:
        argv += ["-mca", "plm_rsh_args", " ".join(rsh)]
    for name in sorted(env_names):
        argv += ["-x", name]
    argv += shlex.split(extra_args)
    return argv + list(command)
