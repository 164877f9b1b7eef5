"""What check, plan and install --dry-run print (text and --json) for every profile in
tests/profiles/ is byte-identical to tests/golden/ (recorded before issue 33's refactor).
See tests/golden_cli.py for how they are made and regenerated."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.standins import clean_env

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
PROFILES = HERE / "profiles"
UPDATE = bool(os.environ.get("SAGEDOCTOR_UPDATE_GOLDEN"))


def test_cli_output_matches_the_golden_files(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(HERE / "golden_cli.py"), str(PROFILES), str(out),
                           env["HOME"]], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    made = {p.name: p.read_bytes() for p in sorted(out.glob("*.txt"))}
    assert len(made) == len(list(PROFILES.glob("*.json"))) > 50
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        for old in GOLDEN.glob("*.txt"):
            old.unlink()
        for name, data in made.items():
            (GOLDEN / name).write_bytes(data)
        return
    golden = {p.name: p.read_bytes() for p in sorted(GOLDEN.glob("*.txt"))}
    assert sorted(made) == sorted(golden), "profiles and golden files differ: regenerate"
    different = [name for name in made if made[name] != golden[name]]
    assert not different, f"the CLI's output changed for {different}"
