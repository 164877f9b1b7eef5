"""CUDA_HOME is a folder with bin/nvcc and include/cuda_runtime.h, or the next candidate.

Fake toolkit trees under tmp_path (real files, a real executable nvcc); roots are injected."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagedoctor.probe.toolchain import (
    CudaCandidate,
    choose_cuda_home,
    cuda_home_candidates,
    probe_toolchain,
)

NVCC = "#!/bin/sh\necho 'Cuda compilation tools, release {v}, V{v}.93'\n"


def toolkit(home: Path, version: str = "12.8", headers: bool = True) -> Path:
    (home / "bin").mkdir(parents=True, exist_ok=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(NVCC.format(v=version), encoding="utf-8")
    nvcc.chmod(0o755)
    if headers:
        (home / "include").mkdir(exist_ok=True)
        (home / "include" / "cuda_runtime.h").write_text("", encoding="utf-8")
    return nvcc


def env_with(tmp_path: Path, path: Path | None = None, **extra: str) -> dict[str, str]:
    return {"PATH": str(path) if path else str(tmp_path / "empty-bin"), **extra}


def test_wrapper_nvcc_without_headers_is_not_cuda_home(tmp_path: Path) -> None:
    usr_local = tmp_path / "usr local é"
    toolkit(usr_local, "13.0", headers=False)  # /usr/local/bin/nvcc, no include/
    facts = probe_toolchain("linux", env=env_with(tmp_path, usr_local / "bin"), usr_local=usr_local)
    assert facts.cuda_home is None
    assert facts.nvcc_path == str(usr_local / "bin" / "nvcc")  # named, so SD176 can say so
    assert facts.nvcc_version == "13.0.93"
    assert facts.cuda_home_rejected == (
        f"{usr_local} (from nvcc on PATH): no include/cuda_runtime.h",)


def test_wrapper_on_path_then_usr_local_cuda_is_taken(tmp_path: Path) -> None:
    usr_local = tmp_path / "usr local"
    toolkit(usr_local, "13.0", headers=False)
    real = usr_local / "cuda"
    toolkit(real, "12.8")
    facts = probe_toolchain("linux", env=env_with(tmp_path, usr_local / "bin"), usr_local=usr_local)
    assert (facts.cuda_home, facts.nvcc_version) == (str(real), "12.8.93")
    assert len(facts.cuda_home_rejected) == 1


def test_bad_cuda_home_falls_through_to_newest_versioned_toolkit(tmp_path: Path) -> None:
    usr_local = tmp_path / "usr"
    toolkit(usr_local / "cuda-12.4")
    newest = usr_local / "cuda-12.10"  # numeric order, not string order
    toolkit(newest, "12.10")
    wrong = tmp_path / "Program Files é" / "cuda"
    wrong.mkdir(parents=True)
    facts = probe_toolchain("linux", env=env_with(tmp_path, CUDA_HOME=str(wrong)),
                            usr_local=usr_local)
    assert facts.cuda_home == str(newest)
    assert facts.cuda_home_rejected == (
        f"{wrong} (from CUDA_HOME): no bin/nvcc, no include/cuda_runtime.h",)


def test_nvcc_symlink_is_followed_to_its_toolkit(tmp_path: Path) -> None:
    real = tmp_path / "opt" / "cuda 12.8 ü"
    nvcc = toolkit(real)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvcc").symlink_to(nvcc)
    facts = probe_toolchain("linux", env=env_with(tmp_path, bin_dir),
                            usr_local=tmp_path / "no-usr-local")
    assert facts.cuda_home == str(real)
    assert facts.cuda_home_rejected == ()


def test_nothing_anywhere(tmp_path: Path) -> None:
    facts = probe_toolchain("linux", env=env_with(tmp_path), usr_local=tmp_path / "none")
    assert (facts.cuda_home, facts.nvcc_path, facts.nvcc_version) == (None, None, None)
    assert facts.cuda_home_rejected == ()  # absent default folders are not worth naming


def test_windows_candidates_program_files_newest_first(tmp_path: Path) -> None:
    program_files = tmp_path / "Program Files"
    base = program_files / "NVIDIA GPU Computing Toolkit" / "CUDA"
    for version in ("v12.4", "v12.8", "v13.0"):
        (base / version).mkdir(parents=True)
    env = {"CUDA_PATH": str(base / "v12.8")}
    got = cuda_home_candidates(env, "windows", None, tmp_path / "unused", program_files)
    assert got == [(base / "v12.8", "CUDA_PATH"), (base / "v13.0", "Program Files"),
                   (base / "v12.8", "Program Files"), (base / "v12.4", "Program Files")]


@pytest.mark.parametrize(("candidates", "home", "rejected"), [
    ([CudaCandidate("/a", "CUDA_HOME", "/a/bin/nvcc", True, False),
      CudaCandidate("/b", "/usr/local/cuda", "/b/bin/nvcc", True, True)],
     "/b", ["/a (from CUDA_HOME): no include/cuda_runtime.h"]),
    # the same folder named twice is judged once
    ([CudaCandidate("/a", "CUDA_HOME", "/a/bin/nvcc", False, True),
      CudaCandidate("/a", "/usr/local/cuda", "/a/bin/nvcc", False, True)],
     None, ["/a (from CUDA_HOME): no bin/nvcc"]),
    ([CudaCandidate("/x", "/usr/local/cuda", "/x/bin/nvcc", False, False)], None, []),
])
def test_choose_cuda_home_table(candidates: list[CudaCandidate], home: str | None,
                                rejected: list[str]) -> None:
    chosen, why = choose_cuda_home(candidates)
    assert (chosen.home if chosen else None, why) == (home, rejected)


def test_plan_never_exports_a_wrapper_folder_as_cuda_home() -> None:
    from sagedoctor.decide.resolve import resolve_plan
    from sagedoctor.decide.resolve.steps import ResolveOptions
    from sagedoctor.facts import load_facts_file
    from sagedoctor.index import shipped_index
    from sagedoctor.plan import Blocked

    profiles = Path(__file__).parent / "profiles"
    facts = load_facts_file(profiles / "linux-wrapper-nvcc-no-toolkit.json")
    # The third-party index wheel is built from tag v2.2.0, broken on this sm90 GPU, so it is
    # no way out: the source build is the only route, and it is blocked, not run against
    # /usr/local, with or without the index.
    result = resolve_plan(facts, shipped_index())
    assert isinstance(result, Blocked)
    assert any(f.code == "SD204" for f in result.findings)
    # ...and without one the build is blocked instead of run against /usr/local.
    result = resolve_plan(facts, shipped_index(), ResolveOptions(use_linux_indexes=False))
    assert isinstance(result, Blocked)
    assert any(f.code == "SD204" and "include/cuda_runtime.h" in f.detail
               for f in result.findings)
