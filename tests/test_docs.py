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
