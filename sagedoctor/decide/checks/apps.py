"""The apps' areas: InvokeAI (its attention backend, its launcher's updates) and ComfyUI
(which Python it runs, its --use-sage-attention flag)."""

from __future__ import annotations

from dataclasses import replace

from ...facts import (
    ComfyUIFacts,
    Facts,
    InvokeAIFacts,
    InvokeAIPackageFacts,
    TargetFacts,
    VerificationFacts,
)
from ..app_switch import choose_invokeai_switch
from ..findings import Finding, finding
from ..fixes import (
    quote,
    quoted_prefix,
)
from ..requirements import (
    invokeai_sage_choice,
    invokeai_switch_pending,
    invokeai_switch_reset,
    verification_is_current,
)
from .sage import recorded_wrong_sageattn


def check_invokeai(facts: Facts, use: str | None = None) -> list[Finding]:
    inv = facts.invokeai
    if inv is None:
        return []
    if inv.root is None:
        return [finding("SD181", "info", "no InvokeAI install found")]
    package = facts.target.invokeai if facts.target else None
    if package is None and inv.marked is False:
        source = inv.root_source
        return [finding("SD180", "ok", f"no InvokeAI at {inv.root} (from {source})"),
                finding("SD186", "warn", f"{inv.root} (from {source}) holds no invokeai.yaml, "
                        "no launcher marker and no invokeai package in a .venv")]
    out = [finding("SD180", "ok", f"{_invokeai_version(facts, inv)} at {inv.root} (from "
                   f"{inv.root_source}); {_invokeai_config(inv)}")]
    out += _config_edit_findings(facts, inv, use)
    out += switch_findings(facts, use)
    if inv.attention_type == "sliced":
        out.append(finding("SD185", "warn", f"{inv.config_path} sets attention_type: sliced"))
    out += launcher_update_findings(inv, facts.verification,
                                    facts.system.os if facts.system else "linux")
    if package is not None:
        out += _package_findings(inv, package)
    return out


def _invokeai_config(inv: InvokeAIFacts) -> str:
    """What the summary says of invokeai.yaml: its schema and attention_type, or none yet."""
    return (f"invokeai.yaml schema {inv.schema_version or '?'}, attention_type "
            f"{inv.attention_type or 'auto (default)'}" if inv.config_exists
            else "no invokeai.yaml yet")


def _config_edit_findings(facts: Facts, inv: InvokeAIFacts, use: str | None) -> list[Finding]:
    """What stands in the way of the plan's invokeai.yaml edit (errors where the plan edits
    it), or the edit itself still to do (SD193)."""
    out: list[Finding] = []
    pending = invokeai_switch_pending(facts, use)
    # The plan edits invokeai.yaml: the sage choice written, or set back for the hook (SD194).
    edits = pending is not None or invokeai_switch_reset(facts, use) is not None
    if inv.root_source == "--root" and not inv.installed and not inv.config_exists:
        # The plan's edit would create invokeai.yaml in a folder InvokeAI never reads.
        out.append(finding("SD197", "error" if edits else "warn",
                           f"{inv.root} (from --root) holds no invokeai.yaml and no .venv"))
    if inv.config_error:
        # The plan's edit step would meet this file: the plan blocks on it, so check says so.
        out.append(finding("SD183", "error" if edits else "warn", inv.config_error))
    elif pending is not None and facts.target is not None:
        os_name = facts.system.os if facts.system else "linux"
        out.append(finding("SD193", "error", f"{inv.config_path or 'invokeai.yaml'} does not "
                           f"set attention_backend: {pending}",
                           f"sagedoctor install --venv {quoted_prefix(facts.target, os_name)}"))
    return out


def _package_findings(inv: InvokeAIFacts, package: InvokeAIPackageFacts) -> list[Finding]:
    """What the installed invokeai package says of attention_backend: unread (SD189), or
    unsupported by this version (SD182), and then a setting of it is an error (SD184)."""
    out: list[Finding] = []
    if package.attention_backend_unread is not None:
        out.append(finding("SD189", "warn", f"InvokeAI {package.version}: attention_backend "
                           f"is declared, but {package.attention_backend_unread}"))
    if package.attention_backend_supported is False:
        out.append(finding("SD182", "info", f"InvokeAI {package.version}"))
        if inv.attention_backend is not None:
            out.append(finding("SD184", "error",
                               f"{inv.config_path} sets attention_backend: "
                               f"{inv.attention_backend}"))
    return out


def _invokeai_version(facts: Facts, inv: InvokeAIFacts) -> str:
    """What the summary calls this install: its version, or why it has none."""
    package = facts.target.invokeai if facts.target else None
    if package is not None:
        return f"InvokeAI {package.version}"
    if facts.target is not None and inv.venv is not None and facts.target.prefix == inv.venv:
        return "InvokeAI root (its venv holds no invokeai package)"
    return "InvokeAI (its venv not inspected" + (
        f": the target is {facts.target.prefix})" if facts.target else ")")


def switch_findings(facts: Facts, use: str | None = None) -> list[Finding]:
    """SD194: InvokeAI's own switch and sagedoctor's hook side by side, which one serves, and
    which is the better one here (a warning where InvokeAI's is on but serves no GPU)."""
    inv, sage = facts.invokeai, invokeai_sage_choice(facts)
    if inv is None or sage is None:
        return []
    switch = choose_invokeai_switch(facts, use)
    app_on = inv.attention_backend == sage
    hooked = facts.verification is not None and facts.verification.hooked
    aside = "; the hook stands aside" if hooked else ""
    if app_on and not switch.app_serves:
        serves = f"InvokeAI's own switch is on but has no kernel here: SDPA serves{aside}"
    elif app_on:
        serves = f"InvokeAI's own switch serves{aside}"
    else:
        serves = "sagedoctor's hook serves" if hooked else "neither is on"
    better = "InvokeAI's own switch" if switch.use == "app" else "sagedoctor's hook"
    detail = (f"attention_backend: {inv.attention_backend or 'not set'}, start-up hook "
              f"{'on' if hooked else 'off'}: {serves}. Better here: {better}: {switch.why}")
    reset = invokeai_switch_reset(facts, use)
    if reset is not None and facts.target is not None:
        # The plan sets it back (the install's invokeai.yaml edit): an error, as SD193 is.
        os_name = facts.system.os if facts.system else "linux"
        return [finding("SD194", "error", f"{detail}. The install sets attention_backend: "
                        f"{reset}", f"sagedoctor install --venv "
                        f"{quoted_prefix(facts.target, os_name)}")]
    wrong = app_on and not switch.app_serves
    fix = ("set attention_backend: auto in invokeai.yaml and run `sagedoctor enable`"
           if wrong else None)
    return [finding("SD194", "warn" if wrong else "info", detail, fix)]


def check_diffusers(facts: Facts) -> list[Finding]:
    """SD155: diffusers' own switch, as the shell check ran in has it, beside the hook."""
    backend = facts.system.diffusers_attn_backend if facts.system else None
    if backend is None:
        return []
    hooked = facts.verification is not None and facts.verification.hooked
    sage = backend.lstrip("_").lower().startswith("sage")
    if sage:
        serves = (f"diffusers calls SageAttention itself ({backend}) for models on its "
                  "dispatcher, with no check; sagedoctor's start-up hook "
                  + ("stands aside in processes started with it" if hooked else "is off"))
    else:
        serves = (f"diffusers uses its {backend} backend; sagedoctor's start-up hook "
                  + ("routes what reaches SDPA" if hooked else "is off"))
    return [finding("SD155", "info", f"DIFFUSERS_ATTN_BACKEND={backend}: {serves}",
                    None if sage else "")]


def runs_comfyui(comfy: ComfyUIFacts, target: TargetFacts | None, os_name: str) -> bool:
    """Whether the inspected target is the Python this ComfyUI runs."""
    if target is None or comfy.python is None:
        return False

    def norm(path: str) -> str:
        return path.casefold().replace("/", "\\") if os_name == "windows" else path

    python, prefix = norm(comfy.python), norm(target.prefix).rstrip("/\\")
    return python == norm(target.executable) or python.startswith(prefix + (
        "\\" if os_name == "windows" else "/"))


def _pth_lists(comfy: ComfyUIFacts, folder: str, os_name: str) -> bool:
    """Whether the ._pth puts ``folder`` on sys.path (its lines are relative to its own
    folder, as CPython reads them)."""
    import ntpath
    import posixpath

    paths = ntpath if os_name == "windows" else posixpath
    base = paths.dirname(comfy.pth_file or "")

    def norm(path: str) -> str:
        normal = str(paths.normpath(path))
        return normal.casefold() if os_name == "windows" else normal

    return norm(folder) in {norm(paths.join(base, line)) for line in comfy.pth_paths}


def _comfyui_summary(comfy: ComfyUIFacts, target: TargetFacts | None, os_name: str) -> str:
    kind = {"portable": "portable build", "desktop": "ComfyUI Desktop",
            "clone": "git clone"}.get(comfy.layout, comfy.layout)
    version = f"ComfyUI {comfy.version}" if comfy.version else "ComfyUI (version unknown)"
    python = comfy.python or "no Python found"
    if runs_comfyui(comfy, target, os_name) and target is not None:
        embedded = "embedded " if comfy.layout == "portable" else ""
        python = f"{embedded}Python {target.python_version} at {comfy.python}"
    flag = {True: "supported", False: "not in this version", None: "support unknown"}[
        comfy.sage_flag_supported]
    on = f", on in {', '.join(comfy.sage_flag_in)}" if comfy.sage_flag_in else ""
    return (f"{version} ({kind}) at {comfy.root} (from {comfy.source}); runs {python}; "
            f"{SAGE_FLAG}: {flag}{on}")


SAGE_FLAG = "--use-sage-attention"


def check_comfyui(facts: Facts, os_name: str) -> list[Finding]:
    """ComfyUI: what it is, the Python it runs, and its own switch against verify's record."""
    comfy, target = facts.comfyui, facts.target
    if comfy is None:
        if "comfyui" in facts.areas and facts.failure_for("comfyui") is None:
            return [finding("SD221", "info", "no ComfyUI found (--comfyui DIR, the target's "
                            "folder, ComfyUI Desktop's config.json)")]
        return []
    out = [finding("SD220", "ok", _comfyui_summary(comfy, target, os_name))]
    folder = quote(comfy.root, os_name)
    ours = runs_comfyui(comfy, target, os_name)
    if comfy.problem:
        out.append(finding("SD226", "warn", comfy.problem))
    if not ours and comfy.python:
        where = target.prefix if target else "none"
        out.append(finding("SD227", "info", f"ComfyUI runs {comfy.python}; this check "
                           f"inspected {where}", f"sagedoctor check --comfyui {folder}"))
    if comfy.pth_file and comfy.pth_imports_site is False:
        if ours and target is not None and not _pth_lists(comfy, target.site_packages, os_name):
            out.append(finding("SD228", "error", f"{comfy.pth_file} neither imports site nor "
                               f"lists {target.site_packages}: nothing installed there can be "
                               "imported"))
        else:
            out.append(finding("SD225", "warn", f"{comfy.pth_file} has no `import site` line: "
                               "this Python never reads site-packages' .pth files"))
    out += comfyui_switch_findings(facts, ours)
    where = ", ".join(comfy.sage_flag_in)
    if comfy.sage_flag_in and comfy.sage_flag_supported is False:
        # A warning: no install fixes a launcher, so an error would leave check and plan
        # disagreeing (check 1, plan empty); the detail says what happens at start.
        out.append(finding("SD224", "warn", f"{where} passes {SAGE_FLAG}, which ComfyUI "
                           f"{comfy.version or '(this version)'} does not declare: it stops "
                           "at start with 'unrecognized arguments'"))
    if comfy.sage_flag_in and ours:
        out += _flag_findings(facts, where, folder)
    return out


def _flag_findings(facts: Facts, where: str, folder: str) -> list[Finding]:
    """ComfyUI starts with --use-sage-attention: against what verify found for this build."""
    target = facts.target
    out: list[Finding] = []
    install = f"sagedoctor install --comfyui {folder}"
    for wrong in recorded_wrong_sageattn(facts):
        out.append(finding(
            "SD222", "error",
            f"ComfyUI starts with {SAGE_FLAG} ({where}), and verify found `sageattn()` "
            f"({wrong.kernel or 'its auto kernel'}) wrong on {wrong.name} "
            f"sm{wrong.arch.replace('.', '')}: every image it makes is garbage",
            f"{install}  (replaces the build); until then remove {SAGE_FLAG} from {where}"))
    record = facts.verification
    if (record is not None and record.status == "verified" and target is not None
            and verification_is_current(record, target) and record.verdict == "sdpa-only"
            and not recorded_wrong_sageattn(facts)):
        out.append(finding(
            "SD223", "warn",
            f"ComfyUI starts with {SAGE_FLAG} ({where}), but verify "
            f"({record.verified_at}) found no SageAttention kernel faster than SDPA on "
            "this GPU at the shapes it measured: the flag makes attention slower",
            f"remove {SAGE_FLAG} from {where}; `sagedoctor enable --comfyui {folder}` "
            "routes only where verify proved a gain"))
    return out


CK_FLAG = "--use-ck-attention"


def comfyui_switch_findings(facts: Facts, ours: bool) -> list[Finding]:
    """SD230 where one launcher passes both flags; SD229: ComfyUI's own switches beside
    sagedoctor's hook (for the ComfyUI whose Python was inspected), and which one serves."""
    comfy = facts.comfyui
    if comfy is None:
        return []
    out = []
    both = [name for name in comfy.sage_flag_in if name in comfy.ck_flag_in]
    if both:
        out.append(finding("SD230", "error", f"{', '.join(both)} passes both {SAGE_FLAG} and "
                           f"{CK_FLAG}"))
    hooked = facts.verification is not None and facts.verification.hooked
    if not ours or not (comfy.sage_flag_in or comfy.ck_flag_in or hooked):
        return out
    parts = []
    if comfy.sage_flag_in:
        parts.append(f"{SAGE_FLAG} ({', '.join(comfy.sage_flag_in)}) serves: `sageattn()` for "
                     "every unmasked call, no check" + ("; the start-up hook stands aside "
                                                         "there" if hooked else ""))
    if comfy.ck_flag_in:
        parts.append(f"{CK_FLAG} ({', '.join(comfy.ck_flag_in)}): Comfy Kitchen's INT8 "
                     "attention serves ComfyUI's own attention calls, not SageAttention")
    if not comfy.sage_flag_in:
        parts.append("sagedoctor's start-up hook " + (
            "serves (it routes only where verify proved a gain)" if hooked else "is off"))
    fix = None if hooked and comfy.sage_flag_in else ""
    out.append(finding("SD229", "info", "; ".join(parts), fix))
    return out


def _after(when: str | None, than: str | None) -> bool:
    """Whether ISO time `when` is later than `than` (no `than`: yes)."""
    import datetime

    if when is None:
        return False
    if than is None:
        return True
    try:
        a, b = datetime.datetime.fromisoformat(when), datetime.datetime.fromisoformat(than)
        if (a.tzinfo is None) != (b.tzinfo is None):
            return True  # not comparable: say it rather than stay silent
        return a > b
    except ValueError:
        return True


def launcher_update_findings(inv: InvokeAIFacts, record: VerificationFacts | None,
                             os_name: str) -> list[Finding]:
    """InvokeAI's launcher markers newer than the last verify: torch may have changed."""
    verified_at = record.verified_at if record is not None and record.status == "verified" \
        else None
    separator = "\\" if os_name == "windows" else "/"
    venv = inv.venv or (f"{inv.root}{separator}.venv" if inv.root else "VENV")
    fix = f"sagedoctor post-update --venv {quote(venv, os_name)}"
    out = []
    if _after(inv.first_run_at, verified_at):
        out.append(finding("SD187", "warn", f"the launcher installed or updated InvokeAI at "
                           f"{inv.first_run_at} (its .first_run marker)"
                           + (f"; last verify {verified_at}" if verified_at else
                              "; no verify since"), fix))
    if verified_at is not None and _after(inv.bootstrap_changed_at, verified_at):
        out.append(finding("SD188", "warn", f".launcher-bootstrap changed at "
                           f"{inv.bootstrap_changed_at}; last verify {verified_at}", fix))
    return out


def for_comfyui_target(findings: list[Finding], comfy: ComfyUIFacts,
                       target: TargetFacts | None, os_name: str) -> list[Finding]:
    """ComfyUI's own Python is the app's interpreter, not a system one: no SD134 for the
    portable build's embedded Python, and fix commands name it by --comfyui DIR (an embedded
    Python has no venv that --venv could name)."""
    assert target is not None
    venv = f"--venv {quoted_prefix(target, os_name)}"
    ours = f"--comfyui {quote(comfy.root, os_name)}"
    out = []
    for f in findings:
        if f.code == "SD134" and comfy.layout == "portable":
            continue
        if f.code == "SD141":  # no torch in ComfyUI's own Python: its requirements bring it
            f = replace(f, fix=f"Install ComfyUI's requirements into {target.executable} "
                        "first (they bring its torch)")
        out.append(replace(f, fix=f.fix.replace(venv, ours)) if venv in f.fix else f)
    return out
