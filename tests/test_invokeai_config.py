"""The InvokeAI step: invokeai.yaml edited in place with comments, BOM and line endings kept,
proven by the target's own InvokeAI loader, refused while InvokeAI runs, and undone exactly.

Real venvs hold stand-in InvokeAI packages whose config_default.py is a standard-library
loader that forbids unknown keys, as InvokeAI's pydantic settings class does (6.14.2 has no
attention_backend; the newer stand-in declares it)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sagedoctor.apps.invokeai import (
    InvokeAIConfigError,
    InvokeAIConfigRejected,
    InvokeAIRunning,
    ProcessInfo,
    apply_settings,
    edited_text,
    invokeai_processes,
    running_processes,
    undo_edit,
)
from tests.standins import INVOKEAI_CONFIG_OLD, add_dist, add_invokeai, make_venv, venv_python

LOADER = textwrap.dedent('''\
    CONFIG_SCHEMA_VERSION = "4.0.3"
    FIELDS = {FIELDS}
    class InvokeAIAppConfig:
        model_fields = dict.fromkeys(FIELDS)
    def load_and_migrate_config(path):
        text = path.read_text(encoding="utf-8-sig")
        for line in text.splitlines():
            line = line.split("#", 1)[0].rstrip()
            if not line or line.startswith(" "):
                continue
            key = line.split(":", 1)[0].strip()
            if key not in FIELDS:
                raise ValueError(key + ": Extra inputs are not permitted [type=extra_forbidden]")
        return InvokeAIAppConfig()
    ''')
OLD_FIELDS = ["schema_version", "attention_type", "precision", "device"]

CONFIG = ("\ufeff# Internal metadata - do not edit:\r\n"
          "schema_version: 4.0.3\r\n"
          "\r\n"
          "# Put user settings here - see https://invoke.ai/configuration/invokeai-yaml/:\r\n"
          "precision: bfloat16   # the 4090 likes it\r\n"
          "device: cuda:0\r\n")


def invokeai_venv(tmp_path: Path, version: str, fields: list[str] | None) -> Path:
    """<root>/.venv with a stand-in InvokeAI; fields None: a package whose loader fails."""
    root = tmp_path / "Invoke é root"
    venv = root / ".venv"
    site = make_venv(venv)
    if fields is None:
        add_invokeai(site, version, INVOKEAI_CONFIG_OLD)  # importing it raises
    else:
        add_dist(site, "invokeai", version, {
            "invokeai/__init__.py": "", "invokeai/app/__init__.py": "",
            "invokeai/app/services/__init__.py": "",
            "invokeai/app/services/config/__init__.py": "",
            "invokeai/app/services/config/config_default.py":
                LOADER.replace("{FIELDS}", repr(fields))})
    (root / "invokeai.yaml").write_bytes(CONFIG.encode("utf-8"))
    return venv


def none_running() -> list[ProcessInfo]:
    return []


NOW = datetime(2026, 12, 3, 8, 40, tzinfo=timezone.utc)


def test_newer_release_gets_the_key_with_comments_bom_and_crlf_kept(tmp_path: Path) -> None:
    venv = invokeai_venv(tmp_path, "6.15.0", [*OLD_FIELDS, "attention_backend"])
    path = venv.parent / "invokeai.yaml"
    before = path.read_bytes()
    edit = apply_settings(path, {"attention_backend": "sage"}, venv_python(venv), venv,
                          none_running, NOW)
    after = path.read_bytes()
    assert after.startswith(b"\xef\xbb\xbf# Internal metadata - do not edit:\r\n")
    assert b"precision: bfloat16   # the 4090 likes it\r\n" in after
    assert after.endswith(b"attention_backend: sage\r\n")
    assert b"\n" not in after.replace(b"\r\n", b"")  # no bare LF slipped in
    assert edit.validated_by == "InvokeAI's own loader"
    assert edit.backup == str(path.with_name(
        "invokeai.yaml.sagedoctor-20261203T084000000000Z.bak"))
    assert Path(edit.backup).read_bytes() == before
    assert undo_edit(edit) == (f"restored {path} from {edit.backup} (its mode, owner and "
                               "group too; the backup removed)")
    assert path.read_bytes() == before and not Path(edit.backup).exists()


def test_6_14_2_loader_rejects_the_key_and_nothing_changes(tmp_path: Path) -> None:
    venv = invokeai_venv(tmp_path, "6.14.2", OLD_FIELDS)
    path = venv.parent / "invokeai.yaml"
    before = path.read_bytes()
    with pytest.raises(InvokeAIConfigRejected, match="extra_forbidden"):
        apply_settings(path, {"attention_backend": "sage"}, venv_python(venv), venv,
                       none_running, NOW)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [".venv", "invokeai.yaml"]


def test_without_an_importable_loader_a_strict_parse_proves_it_and_says_so(
        tmp_path: Path) -> None:
    venv = invokeai_venv(tmp_path, "6.15.0", None)
    path = venv.parent / "invokeai.yaml"
    edit = apply_settings(path, {"attention_backend": "sage"}, venv_python(venv), venv,
                          none_running, NOW)
    assert edit.validated_by.startswith("a strict YAML parse (InvokeAI's loader could not be "
                                        "imported: ImportError: must not be imported")


def test_a_running_invokeai_of_this_venv_stops_the_edit(tmp_path: Path) -> None:
    venv = invokeai_venv(tmp_path, "6.15.0", [*OLD_FIELDS, "attention_backend"])
    path = venv.parent / "invokeai.yaml"
    before = path.read_bytes()
    script = venv / "bin" / "invokeai-web"
    script.write_text("import time\ntime.sleep(60)\n", encoding="utf-8")
    child = subprocess.Popen([str(venv_python(venv)), str(script)])
    try:
        time.sleep(0.3)  # let the process show its argv
        with pytest.raises(InvokeAIRunning, match=f"pid {child.pid}"):
            apply_settings(path, {"attention_backend": "sage"}, venv_python(venv), venv)
    finally:
        child.kill()
        child.wait()
    assert path.read_bytes() == before
    # once it has stopped, the same call goes through
    apply_settings(path, {"attention_backend": "sage"}, venv_python(venv), venv)
    assert b"attention_backend: sage" in path.read_bytes()


def test_process_matching_is_about_this_venv_or_root(tmp_path: Path) -> None:
    venv, root = tmp_path / "root" / ".venv", tmp_path / "root"
    other = tmp_path / "other" / ".venv"
    procs = [
        ProcessInfo(1, (str(venv / "bin" / "invokeai-web"),), None),  # launcher form
        ProcessInfo(2, (str(other / "bin" / "invokeai-web"),), None),  # another install
        ProcessInfo(3, ("/usr/bin/python3", "-m", "http.server"), "/usr/bin/python3"),
        ProcessInfo(4, ("invokeai-web", "--root", str(root)), "/opt/x/python"),
        ProcessInfo(5, (sys.executable, "/home/u/notes/invokeai-tips.txt"), sys.executable),
    ]
    assert [p.pid for p in invokeai_processes(procs, venv, root)] == [1, 4]


def test_relative_arguments_mean_the_process_folder_not_the_askers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The auto-repair asks from <venv>/sagedoctor: `python invokeai-web` run in another
    folder was once taken for this venv's InvokeAI, and the repair refused (SD196)."""
    root = tmp_path / "root"
    venv = root / ".venv"
    (venv / "sagedoctor").mkdir(parents=True)
    monkeypatch.chdir(venv / "sagedoctor")
    elsewhere = str(tmp_path / "another install")
    procs = [
        ProcessInfo(1, ("/usr/bin/python3", "invokeai-web"), "/usr/bin/python3", elsewhere),
        ProcessInfo(2, ("python", "bin/invokeai-web"), "/usr/bin/python3", None),  # unknown
        ProcessInfo(3, ("python", "-m", "invokeai.app.run_app", "--root", "."),
                    "/usr/bin/python3", elsewhere),
        # these are this venv's, relative to their own folders
        ProcessInfo(4, ("/usr/bin/python3", "./invokeai-web"), "/usr/bin/python3",
                    str(venv / "bin")),
        ProcessInfo(5, ("invokeai-web", "--root", "."), "/opt/x/python", str(root)),
        ProcessInfo(6, ("invokeai-web", "--root", "root"), "/opt/x/python", str(tmp_path)),
    ]
    assert [p.pid for p in invokeai_processes(procs, venv, root)] == [4, 5, 6]


def test_a_sagedoctor_command_naming_invokeai_is_no_invokeai(tmp_path: Path) -> None:
    root = tmp_path / "invokeai"  # the launcher's default root name
    venv = root / ".venv"
    procs = [
        ProcessInfo(1, (sys.executable, "-m", "sagedoctor", "install", "invokeai", "--root",
                        str(root)), sys.executable),
        ProcessInfo(2, (sys.executable, str(tmp_path / "tool" / "bin" / "sagedoctor"),
                        "tui", "--venv", str(venv), "--root", str(root)), sys.executable),
        ProcessInfo(3, ("/home/u/.local/bin/sagedoctor", "check", "invokeai", "--root",
                        str(root)), None),
        ProcessInfo(4, (str(venv / "bin" / "python"), "-m", "invokeai.app.run_app"), None),
    ]
    assert [p.pid for p in invokeai_processes(procs, venv, root)] == [4]


def test_the_asking_process_is_not_in_the_list() -> None:
    pids = {p.pid for p in running_processes()}
    assert os.getpid() not in pids and os.getppid() in pids


def test_missing_file_is_created_and_undo_removes_it(tmp_path: Path) -> None:
    venv = invokeai_venv(tmp_path, "6.15.0", [*OLD_FIELDS, "attention_backend"])
    path = venv.parent / "invokeai.yaml"
    path.unlink()
    edit = apply_settings(path, {"attention_backend": "sage"}, venv_python(venv), venv,
                          none_running, NOW)
    assert path.read_text(encoding="utf-8") == "attention_backend: sage\n"
    assert edit.backup is None
    assert undo_edit(edit) == f"removed {path} (sagedoctor had created it)"
    assert not path.exists()


@pytest.mark.parametrize("content", [b"- a list\n- not a mapping\n", b"key: [unclosed\n",
                                     b"precision: \xff\xfe\n"])
def test_unusable_files_are_refused_untouched(tmp_path: Path, content: bytes) -> None:
    venv = invokeai_venv(tmp_path, "6.15.0", [*OLD_FIELDS, "attention_backend"])
    path = venv.parent / "invokeai.yaml"
    path.write_bytes(content)
    with pytest.raises(InvokeAIConfigError):
        apply_settings(path, {"attention_backend": "sage"}, venv_python(venv), venv,
                       none_running, NOW)
    assert path.read_bytes() == content


def other_group() -> int | None:
    """A group this user may give a file that is not its own primary one (root: daemon's, 1;
    a user: a supplementary group), or None where there is none."""
    if not hasattr(os, "getuid"):
        return None
    if os.getuid() == 0:
        return 1
    return next((g for g in os.getgroups() if g != os.getegid()), None)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes and groups")
def test_an_edit_and_its_undo_keep_mode_owner_and_group(tmp_path: Path) -> None:
    venv = invokeai_venv(tmp_path, "6.15.0", [*OLD_FIELDS, "attention_backend"])
    path = venv.parent / "invokeai.yaml"
    group = other_group()
    if group is not None:
        os.chown(path, -1, group)
    path.chmod(0o640)
    before = path.stat()
    want = (0o640, before.st_uid, before.st_gid)

    def meta(p: Path) -> tuple[int, int, int]:
        info = p.stat()
        return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid

    edit = apply_settings(path, {"attention_backend": "sage"}, venv_python(venv), venv,
                          none_running, NOW)
    assert path.read_bytes().endswith(b"attention_backend: sage\r\n")
    assert meta(path) == want  # not 0600 and ours
    assert edit.backup is not None and meta(Path(edit.backup)) == want
    assert path.stat().st_ino != before.st_ino  # still an atomic replace, not a rewrite
    said = undo_edit(edit)
    assert said.startswith(f"restored {path} from {edit.backup}") and "backup removed" in said
    assert meta(path) == want and path.read_bytes() == CONFIG.encode("utf-8")
    assert not Path(edit.backup).exists()
    assert sorted(p.name for p in path.parent.iterdir()) == [".venv", "invokeai.yaml"]


def test_a_new_file_gets_the_mode_the_umask_gives(tmp_path: Path) -> None:
    venv = invokeai_venv(tmp_path, "6.15.0", [*OLD_FIELDS, "attention_backend"])
    path = venv.parent / "invokeai.yaml"
    path.unlink()
    old = os.umask(0o027)
    try:
        apply_settings(path, {"attention_backend": "sage"}, venv_python(venv), venv,
                       none_running, NOW)
    finally:
        os.umask(old)
    if sys.platform != "win32":
        assert stat.S_IMODE(path.stat().st_mode) == 0o640  # 0666 & ~027, as InvokeAI's own


def test_removing_a_key_keeps_every_other_byte_and_the_comments_below_it() -> None:
    text = ("# mine\nschema_version: 4.0.3\nprecision: float16  # why\n"
            "attention_backend: sage   # set by sagedoctor\n# a comment of mine\nlog_level: info\n")
    assert edited_text(text, {}, Path("invokeai.yaml"), ("attention_backend",)) == (
        "# mine\nschema_version: 4.0.3\nprecision: float16  # why\n"
        "# a comment of mine\nlog_level: info\n")
    # not a plain line (a flow mapping): the round-trip editor takes the key out instead
    flow = "{schema_version: 4.0.3, attention_backend: sage}\n"
    out = edited_text(flow, {}, Path("invokeai.yaml"), ("attention_backend",))
    assert "attention_backend" not in out and "schema_version: 4.0.3" in out
    # a nested key of that name is not the top-level setting: nothing is taken out
    nested = "schema_version: 4.0.3\nextra:\n  attention_backend: sage\n"
    assert "attention_backend: sage" in edited_text(nested, {}, Path("invokeai.yaml"),
                                                    ("attention_backend",))
