"""A hostile (or merely foreign) peer for Perseus's TCP listeners, in plain Python: raw
sockets, and the client side of Note [Connection handshake] (src/transport/tcp/auth.h)
re-implemented from the spec, so that a test can send garbage, truncated or oversized frames,
a wrong secret, or replay a recorded exchange.

Store frames (Note [Store frames], src/rendezvous/store_protocol.h) follow the handshake:
body_len u32 | op u8 | key_len u16 | key | operand, big-endian."""

import hashlib
import hmac
import os
import socket
import struct
import time

MAGIC = b"PRS1"
PURPOSE_STORE, PURPOSE_DATA = 1, 2
OP_CHECK = 4


def hello(purpose, meta=b"", nonce=None):
    nonce = nonce or os.urandom(32)
    return MAGIC + struct.pack(">BH", purpose, len(meta)) + nonce + meta


def mac(secret, label, hello_bytes, server_nonce):
    return hmac.new(secret, label + hello_bytes + server_nonce, hashlib.sha256).digest()


def connect(port, host="127.0.0.1", timeout=5.0):
    s = socket.create_connection((host, port), timeout=timeout)
    s.settimeout(timeout)
    return s


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def closed_by_peer(s, within=15.0):
    """True when the server closes the connection (EOF or reset) within `within` seconds
    without sending anything that completes a handshake (an accept byte)."""
    s.settimeout(within)
    deadline = time.time() + within
    try:
        while time.time() < deadline:
            data = s.recv(4096)
            if not data:
                return True
            if b"\x01" == data[-1:] and len(data) in (1, 65):
                return False  # looks like an accept
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False


def handshake(s, secret, purpose=PURPOSE_STORE, meta=b"", wrong=False):
    """Runs the client side. Returns (accepted, bytes_sent) where bytes_sent is what a
    recorder on the wire would have captured from the client."""
    h = hello(purpose, meta)
    s.sendall(h)
    challenge = recv_exact(s, 64)
    if len(challenge) != 64:
        return False, h
    server_nonce, server_mac = challenge[:32], challenge[32:]
    if not wrong and not hmac.compare_digest(server_mac, mac(secret, b"S", h, server_nonce)):
        raise AssertionError("the server's challenge does not verify with the job secret")
    proof = mac(secret if not wrong else os.urandom(32), b"C", h, server_nonce)
    s.sendall(proof)
    accept = recv_exact(s, 1)
    return accept == b"\x01", h + proof


def check_request(key):
    body = struct.pack(">BH", OP_CHECK, len(key)) + key
    return struct.pack(">I", len(body)) + body


def listening_ports(pid):
    """TCP ports that process `pid` listens on (IPv4 and IPv6)."""
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports
