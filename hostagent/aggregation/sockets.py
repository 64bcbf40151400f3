"""The UDP socket a worker or parameter server of one aggregation job uses."""
from __future__ import annotations

import socket

from wire import aggregation_codec as ah


def job_socket(job: int, bind_ip: str = "0.0.0.0", buffer_bytes: int = 4 << 20) -> socket.socket:
    """A non-blocking UDP socket on the job's port (workers and parameter
    servers alike), with room for a window of packets each way."""
    port = ah.job_port(job)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
    try:
        sock.bind((bind_ip, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"job {job}: cannot bind UDP {bind_ip}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock
