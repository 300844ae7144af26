"""Hostile peers: while a job runs (TCP data plane, 2 ranks), raw sockets hit every Perseus
port (the rendezvous store in perseusrun, each rank's data-plane listener if still open) with
garbage, oversized length fields, a wrong secret, a replayed handshake, truncated and silent
connections. Each is rejected and logged; the job finishes with correct results."""

import os
import socket
import struct
import time

import pytest

import hostile
import relsupport as rs

pytestmark = pytest.mark.timeout(150)


def attack_unauthenticated(port):
    """Returns {attack: rejected?} for attacks that need no secret. Connections that the
    listener no longer accepts (refused) count as rejected."""
    out = {}

    def attempt(name, fn):
        try:
            s = hostile.connect(port)
        except ConnectionRefusedError:
            out[name] = "refused"
            return
        with s:
            out[name] = fn(s)

    def garbage(s):
        s.sendall(b"GET / HTTP/1.0\r\n\r\n" + os.urandom(4096))
        return hostile.closed_by_peer(s)

    def huge_meta(s):
        s.sendall(hostile.MAGIC + struct.pack(">BH", 1, 0xFFFF) + os.urandom(32))
        return hostile.closed_by_peer(s)

    def bad_purpose(s):
        s.sendall(hostile.MAGIC + b"\x07")
        return hostile.closed_by_peer(s)

    def wrong_secret(s):
        accepted, _ = hostile.handshake(s, os.urandom(32), wrong=True)
        return not accepted and hostile.closed_by_peer(s)

    for name, fn in [("garbage", garbage), ("huge meta_len", huge_meta),
                     ("bad purpose", bad_purpose), ("wrong secret", wrong_secret)]:
        attempt(name, fn)
    return out


def attack_store_with_secret(port, secret):
    """Attacks that know what a recorder on the wire would know: the secret-holder's own
    bytes (replay) or, past a genuine handshake, malformed frames."""
    out = {}
    with hostile.connect(port) as s:
        accepted, recorded = hostile.handshake(s, secret)
        assert accepted, "a correct handshake was refused: the test's client is wrong"
        s.sendall(hostile.check_request(b"perseus/job_id"))
        reply = hostile.recv_exact(s, 5)
        assert len(reply) == 5, "no reply to an authenticated CHECK"
        s.sendall(struct.pack(">I", 0xFFFFFFFF) + b"\x02")  # body_len far above the limit
        out["huge frame length"] = hostile.closed_by_peer(s)
    with hostile.connect(port) as s:
        hello_bytes, proof = recorded[:-32], recorded[-32:]
        s.sendall(hello_bytes)
        challenge = hostile.recv_exact(s, 64)
        s.sendall(proof)  # the old proof, over a new server nonce
        out["replayed handshake"] = len(challenge) == 64 and hostile.closed_by_peer(s)
    with hostile.connect(port) as s:
        accepted, _ = hostile.handshake(s, secret)
        body = struct.pack(">BH", 9, 3) + b"key"  # unknown op
        s.sendall(struct.pack(">I", len(body)) + body)
        out["unknown op"] = hostile.closed_by_peer(s)
    return out


def test_hostile_connections_are_rejected_and_the_job_is_unaffected(tmp_path):
    env = rs.job_env(PERSEUS_CPU_OPERATIONS="tcp", PERSEUS_TIMEOUT=20)
    job = rs.Job(tmp_path, "faults.py", "--mode", "loop", "--seconds", 15, "--elements", 65536,
                 "--dump-secret", np=2, env=env).start()
    silent = []
    try:
        assert job.wait_marker("progress.1", 60), job.wait().output()
        secret = bytes.fromhex((job.results / "secret").read_text())
        store_ports = hostile.listening_ports(job.proc.pid)
        assert store_ports, "perseusrun listens on no TCP port?"
        rank_pids = [p for p in rs.tagged_pids(job.tag) if p != job.proc.pid]
        data_ports = set()
        for pid in rank_pids:
            data_ports |= hostile.listening_ports(pid)
        report = {}
        for port in sorted(store_ports | data_ports):
            # A silent, half-open connection and a truncated hello stay open throughout.
            for payload in (b"", hostile.MAGIC + b"\x01\x00"):
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                    s.sendall(payload)
                    silent.append(s)
                except ConnectionRefusedError:
                    pass
            kind = "store" if port in store_ports else "data"
            for attack, rejected in attack_unauthenticated(port).items():
                report["%s:%d %s" % (kind, port, attack)] = rejected
        for port in store_ports:
            for attack, rejected in attack_store_with_secret(port, secret).items():
                report["store:%d %s" % (port, attack)] = rejected
        for line in sorted(report.items()):
            print("  %s -> %s" % line)
        assert all(v in (True, "refused") for v in report.values()), report
        job.wait()
    finally:
        for s in silent:
            s.close()
        rs.kill_tagged(job.tag)
    assert job.returncode == 0, job.output()
    done = [r for recs in job.results_by_rank().values() for r in recs
            if r["outcome"] == "iterations"]
    assert len(done) == 2 and done[0]["count"] == done[1]["count"], done
    dropped = [l for l in job.stderr.splitlines() if "dropped connection" in l]
    print("  perseusrun logged %d dropped connections, e.g. %s" % (
        len(dropped), dropped[:1]))
    # Rate-limited: the first few lines, then a count when the store stops.
    assert len(dropped) >= 3, job.output()
    assert any("more dropped connections were not logged" in l or "more in the last" in l
               for l in dropped), job.output()
    job.assert_clean()
