"""The interactive front door: check, plan, install and verify in one Textual app.

textual is imported only by `run_tui` (and the modules it loads), never on the CLI's path."""

from __future__ import annotations

from .cancel import InstallCancelled
from .session import TuiOptions

__all__ = ["InstallCancelled", "TuiOptions", "run_tui"]


def run_tui(options: TuiOptions) -> int:
    from .app import SagedoctorApp

    app = SagedoctorApp(options)
    app.run()
    return app.return_code or 0
