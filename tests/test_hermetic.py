"""The guard in conftest.py: a test cannot reach anything but the loopback address."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from tests.conftest import NetworkReached


def test_a_public_address_is_refused_before_any_packet_is_sent() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        with pytest.raises(NetworkReached, match="hermetic"):
            s.connect(("192.0.2.1", 443))  # TEST-NET-1: never routed
        with pytest.raises(NetworkReached):
            s.connect_ex(("192.0.2.1", 443))


def test_the_loopback_address_stays_reachable() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        accepted = threading.Thread(target=lambda: server.accept()[0].close(), daemon=True)
        accepted.start()
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
        accepted.join(5)


def test_child_processes_meet_a_closed_proxy_for_anything_not_local() -> None:
    code = ("import os, urllib.request\n"
            "print(os.environ['HTTPS_PROXY'], os.environ['NO_PROXY'])\n"
            "try:\n"
            "    urllib.request.urlopen('https://pypi.org/simple/', timeout=10)\n"
            "except OSError as exc:\n"
            "    print('refused', type(exc).__name__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    first, second = done.stdout.splitlines()
    assert first.startswith("http://127.0.0.1:9 ") and "127.0.0.1" in first
    assert second.startswith("refused")
