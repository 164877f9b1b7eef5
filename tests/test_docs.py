from __future__ import annotations

from pathlib import Path

from sagedoctor.decide.findings import CATALOG

DOCS = Path(__file__).parents[1] / "docs"
README = Path(__file__).parents[1] / "README.md"


def test_check_page_lists_every_code_with_its_title_and_fix() -> None:
    page = (DOCS / "check.md").read_text(encoding="utf-8")
    rows = {line.split("</a>")[1].split(" |")[0]: line for line in page.splitlines()
            if line.startswith("| <a id=")}
    assert set(rows) == set(CATALOG)
    for code, kind in CATALOG.items():
        assert kind.title in rows[code]
        assert kind.fix.replace("|", "\\|") in rows[code]


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (Path(__file__).parents[1] / ".ci" / "run").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    assert "bash scripts/test.sh" in ci and "bash scripts/test.sh" in readme


def test_wheel_selection_table_matches_the_shipped_index() -> None:
    from sagedoctor.index import shipped_index
    from sagedoctor.index.table import rewrite

    page = DOCS / "wheel-selection.md"
    assert rewrite(page, shipped_index()) == page.read_text(encoding="utf-8"), (
        "run: python -m sagedoctor.index.table docs/wheel-selection.md")


def test_every_error_code_is_documented() -> None:
    import re

    source = Path(__file__).parents[1] / "sagedoctor"
    codes = {m for f in source.rglob("*.py")
             for m in re.findall(r'code = "(SD9\d\d)"', f.read_text(encoding="utf-8"))}
    page = (DOCS / "check.md").read_text(encoding="utf-8")
    assert codes, "no error codes found"
    assert {c for c in codes if f'{c} <span id="{c.lower()}"></span>' not in page} == set()


def test_report_schema_page_names_every_facts_field_and_the_schema_versions() -> None:
    import dataclasses
    import re

    from sagedoctor import facts
    from sagedoctor.render.findings import REPORT_SCHEMA_VERSION

    page = (DOCS / "report-schema.md").read_text(encoding="utf-8")
    assert re.search(rf"^schema_version +{REPORT_SCHEMA_VERSION}$", page, re.M)
    assert re.search(rf"^facts_schema_version +{facts.FACTS_SCHEMA_VERSION}$", page, re.M)
    words = set(re.findall(r"[a-z_]+", page))
    missing = {f"{cls.__name__}.{field.name}" for cls in vars(facts).values()
               if isinstance(cls, type) and dataclasses.is_dataclass(cls)
               and cls.__module__ == facts.__name__
               for field in dataclasses.fields(cls) if field.name not in words}
    assert missing == set()


def test_exit_codes_the_pages_give_are_the_commands_own(tmp_path: Path) -> None:
    import re

    from sagedoctor.commands.post_update import PostUpdateError, RepairFailed
    from tests.standins import clean_env, run_cli

    # docs/updates.md's table: each code listed in a row exits with that row's status.
    rows = {code: int(status) for status, codes in re.findall(
        r"^\| (\d+) \|.*\(((?:SD\d{3}(?:, )?)+)\) \|$",
        (DOCS / "updates.md").read_text(encoding="utf-8"), re.M)
        for code in codes.split(", ")}
    assert rows == {error.code: error.exit_status for error in (PostUpdateError, RepairFailed)}
    # docs/comfyui.md: a --comfyui folder that holds no ComfyUI.
    empty = tmp_path / "not comfy"
    empty.mkdir()
    done = run_cli(["check", "--comfyui", str(empty)], clean_env(tmp_path))
    page = " ".join((DOCS / "comfyui.md").read_text(encoding="utf-8").split())
    assert f"holds no ComfyUI is an error (exit {done.returncode}," in page, done.stderr
