"""The supported-combinations table of docs/wheel-selection.md, generated from the index.

`python -m sagedoctor.index.table docs/wheel-selection.md` rewrites the part between the
markers; a test keeps the page and the shipped index in step.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..decide.matrix import TORCH_CUDA_MATRIX
from . import WheelIndex, shipped_index, spec_text

BEGIN = "<!-- generated from wheels_index.toml: begin -->"
END = "<!-- generated from wheels_index.toml: end -->"


def supported_table(index: WheelIndex) -> str:
    lines = ["### triton-windows per torch", "", "| torch | triton-windows | Linux torch pins |",
             "| --- | --- | --- |"]
    for pair in index.triton.pairs:
        windows = f"`{spec_text(pair.windows)}`" if pair.windows else "unknown"
        linux = f"{pair.linux[0]}.{pair.linux[1]}" if pair.linux else "-"
        lines.append(f"| {pair.torch[0]}.{pair.torch[1]} | {windows} | {linux} |")
    releases = ", ".join(f"{a}.{b}" for a, b in index.triton.windows_releases) or "not recorded"
    lines += ["", f"Turing (sm75): the pairing intersected with "
              f"`triton-windows{spec_text(index.triton.turing_spec)}` (torch 2.6 and older).",
              "", f"triton-windows minors released on PyPI: {releases}.", "",
              "### PyTorch's CUDA builds per torch (Linux x86-64 and Windows)", "",
              "| torch | CUDA builds (kernels for) | PyPI's default |", "| --- | --- | --- |"]
    for minor, release in sorted(TORCH_CUDA_MATRIX.items()):
        builds = "; ".join(f"{v.label} (sm{', sm'.join(a.replace('.', '') for a in v.archs)})"
                           for v in release.variants)
        lines.append(f"| {minor[0]}.{minor[1]} | {builds} | {release.default} |")
    lines += ["",
              "### SageAttention wheels for Windows", "",
              "| wheel | CUDA | torch | Python | sha256 | known problems |",
              "| --- | --- | --- | --- | --- | --- |"]
    for w in sorted(index.windows_wheels, key=lambda w: (w.post or 0, w.cuda, w.file),
                    reverse=True):
        digest = f"{w.sha256_source}" if w.sha256 else "not yet known"
        lines.append(f"| [`{w.file}`]({w.url}) | {w.cuda} | `{spec_text(w.torch)}` | "
                     f">= {w.python_min[0]}.{w.python_min[1]} | {digest} | "
                     f"{'; '.join(w.problems) or '-'} |")
    b = index.build
    lines += ["", "### Linux source builds", "",
              f"Upstream [{b.repository}]({b.repository}) at `{b.commit}`; architectures "
              + ", ".join(b.archs) + ".", "", "| arch | minimum nvcc |", "| --- | --- |"]
    lines += [f"| {cc} | {v} |" for cc, v in b.min_nvcc.items()]
    for ref in b.rejected:
        lines.append(f"\nNever `{ref.ref}` (`{ref.commit[:7]}`): {ref.reason}.")
    if index.linux_indexes:
        lines += ["", "### Linux wheel indexes tried first (third-party)", "",
                  "| index | CUDA | torch | built for | built from | never planned on |",
                  "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {e.url} | {e.cuda} | `{spec_text(e.torch)}` | "
                  f"{', '.join(e.archs) or 'not recorded'} | "
                  f"{e.source_repository} at `{e.source_ref}` | "
                  f"{', '.join('sm' + a.replace('.', '') for a in e.broken_archs) or '-'}; "
                  "any GPU not built for |"
                  for e in index.linux_indexes]
    return "\n".join(lines) + "\n"


def rewrite(page: Path, index: WheelIndex) -> str:
    text = page.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{supported_table(index)}{END}{tail}"


if __name__ == "__main__":
    target = Path(sys.argv[1])
    target.write_text(rewrite(target, shipped_index()), encoding="utf-8")
