"""The suite is hermetic: no test reaches the network. In this process a socket may connect
only to the loopback address or a Unix socket (the local HTTP servers tests start); child
processes (uv, pip, the CLI) get a proxy on a closed loopback port for everything else, so a
test that would download from a public index fails at once, on any machine, instead of
passing where there is a network and failing where there is none."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

CLOSED_PORT_PROXY = "http://127.0.0.1:9"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


class NetworkReached(AssertionError):
    pass


def _is_local(address: Any) -> bool:
    if isinstance(address, (str, bytes)):
        return True  # AF_UNIX
    host = address[0] if isinstance(address, tuple) and address else address
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guarded_connect(self: socket.socket, address: Any) -> None:
    if not _is_local(address):
        raise NetworkReached(f"a test tried to reach {address!r}: the suite must be hermetic")
    _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    if not _is_local(address):
        raise NetworkReached(f"a test tried to reach {address!r}: the suite must be hermetic")
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True, scope="session")
def _no_network() -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in
             ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
              "all_proxy", "NO_PROXY", "no_proxy")}
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY",
                 "all_proxy"):
        os.environ[name] = CLOSED_PORT_PROXY
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = ",".join(LOOPBACK_NAMES)
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        socket.socket.connect = _real_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = _real_connect_ex  # type: ignore[method-assign]
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# The modules no GPU-like host can change: pure decisions over profiles and recorded files,
# parsers, and code run with every host input injected (no nvidia-smi, nvcc, CUDA_HOME or
# PATH of the test process is read, and the test interpreter's sageattention, triton and
# runtime are never imported or borrowed). Every other test is marked `host` and runs again
# in scripts/gpu-host-like.sh; a new module is `host` until it is listed here.
HOST_INDEPENDENT = frozenset({
    "test_agreement", "test_bench_block_orders", "test_compat", "test_docs", "test_facts",
    "test_file_meta", "test_fuzz_comfyui", "test_fuzz_facts", "test_fuzz_index",
    "test_fuzz_invokeai", "test_fuzz_state", "test_fuzz_versions", "test_import_graph",
    "test_install_hostile", "test_install_steps", "test_integrity", "test_invokeai_config",
    "test_proc", "test_profiles", "test_resolve", "test_resolve_uninstall",
    "test_runtime_bundle", "test_state", "test_sweep_plan", "test_probe_failure_fix",
    "test_user_install",  # its own tool folder and Python, the dependencies' wheels only
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem not in HOST_INDEPENDENT:
            item.add_marker(pytest.mark.host)
