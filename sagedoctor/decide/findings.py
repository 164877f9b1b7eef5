"""Finding codes: what each means and how it is fixed. The docs page lists every one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .. import exit_codes

SEVERITIES = ("ok", "info", "warn", "error")
# The areas a check covers, in report order.
AREAS = ("system", "gpu", "python", "torch", "triton", "sageattention", "toolchain", "invokeai",
         "comfyui")
# The one finding per area that carries its summary line.
SUMMARY_CODES = frozenset({"SD100", "SD110", "SD130", "SD140", "SD150", "SD160", "SD170", "SD180",
                           "SD220"})
# Found by the install's preflight (what the commit phase would meet), not by `check`.
PREFLIGHT_CODES = frozenset({"SD135", "SD195", "SD196", "SD198"})


@dataclass(frozen=True)
class Finding:
    code: str
    area: str
    severity: str  # one of SEVERITIES
    title: str
    detail: str = ""
    fix: str = ""
    fatal: bool = False  # SageAttention cannot work on this machine at all


@dataclass(frozen=True)
class FindingKind:
    code: str
    area: str
    title: str
    meaning: str
    fix: str


_KINDS = [
    FindingKind("SD100", "system", "System", "The operating system and CPU architecture.", ""),
    FindingKind("SD101", "system", "Operating system not supported",
                "SageAttention needs Linux or Windows on x86-64 (Linux on arm64 can build "
                "from source). macOS and Windows on Arm cannot run it.",
                "Use a Linux or Windows x86-64 machine with an NVIDIA GPU."),
    FindingKind("SD102", "system", "Running under WSL",
                "WSL is treated as Linux; the GPU driver lives on the Windows side.",
                "Keep the Windows NVIDIA driver current; do not install a Linux driver in WSL."),
    FindingKind("SD110", "gpu", "GPUs", "The NVIDIA GPUs found and the driver version.", ""),
    FindingKind("SD111", "gpu", "No NVIDIA GPU",
                "No NVIDIA GPU was found. SageAttention runs only on NVIDIA GPUs; AMD, Intel "
                "and Apple GPUs are named when seen.",
                "Run on a machine with an NVIDIA GPU of compute capability 8.0 or newer."),
    FindingKind("SD112", "gpu", "GPU too old",
                "Compute capability below 8.0 (below 7.5 everywhere): SageAttention 2 has no "
                "kernels for it. It needs compute capability 8.0 or newer (7.5 on Windows, "
                "through Triton).",
                "Use a GPU of compute capability 8.0 or newer (RTX 30xx, A100 or newer); on "
                "Windows an RTX 20xx (7.5) works through Triton."),
    FindingKind("SD113", "gpu", "Turing GPU (sm75)",
                "Compute capability 7.5 works only through the Windows fork's Triton path, "
                "with triton-windows below 3.3 (which pairs with torch 2.6 or older); upstream "
                "Linux builds reject it.",
                "On Windows: the triton-windows the Triton finding names (SD146 when this torch "
                "has none for Turing); on Linux use a newer GPU."),
    FindingKind("SD114", "gpu", "Jetson Orin (sm87) not supported",
                "Upstream SageAttention raises 'Unsupported CUDA architecture: sm87'.",
                "No fix upstream; use a discrete GPU."),
    FindingKind("SD115", "gpu", "Compute capability unknown",
                "The driver did not report the compute capability (R470 drivers lack the "
                "field) and the GPU name is not in the table.",
                "Update the NVIDIA driver, or check the GPU's capability by hand."),
    FindingKind("SD116", "gpu", "Could not list GPUs",
                "nvidia-smi failed, hung or printed something unusable.",
                "Run `nvidia-smi` by hand; reinstall the NVIDIA driver if it fails."),
    FindingKind("SD120", "gpu", "Driver too old for torch's CUDA",
                "Each CUDA major needs a minimum driver: 13.x needs 580+, 12.x needs "
                "525.60.13+ (Linux) or 528.33+ (Windows).",
                "Update the NVIDIA driver, or use a torch built for an older CUDA."),
    FindingKind("SD121", "gpu", "Driver version unknown",
                "The driver version could not be read, so its CUDA support is unchecked.",
                "Run `nvidia-smi` to see the driver version."),
    FindingKind("SD130", "python", "Python", "The target interpreter.", ""),
    FindingKind("SD131", "python", "Python lacks include/ or libs/",
                "Triton on Windows compiles a small module at first use and needs the base "
                "interpreter's include\\Python.h and libs\\python3XX.lib (embedded and some "
                "uv-managed Pythons lack them).",
                "Copy the include and libs folders of the same Python version into the base "
                "interpreter's folder (triton-windows README, section 8)."),
    FindingKind("SD132", "python", "Environment not writable",
                "The target's site-packages cannot be written by this user.",
                "Run as the user who owns the venv, or fix its permissions."),
    FindingKind("SD133", "python", "Python version not supported",
                "SageAttention 2 needs Python 3.9 or newer (3.10+ for current Windows wheels); "
                "Triton supports up to 3.14.",
                "Use a venv with Python 3.10 to 3.13."),
    FindingKind("SD134", "python", "Not a virtual environment",
                "The target is a system or base interpreter; installing into it affects every "
                "program that uses it.",
                "Create a venv for the app, or pass --venv."),
    FindingKind("SD140", "torch", "PyTorch", "The installed torch build.", ""),
    FindingKind("SD141", "torch", "PyTorch not installed",
                "The target has no torch. sagedoctor never installs or changes torch.",
                "Install the app (which brings its torch) first, or pass --venv for its venv."),
    FindingKind("SD142", "torch", "CPU-only PyTorch on an NVIDIA machine",
                "torch was built without CUDA, so no GPU kernel can run.",
                "Reinstall the same torch from a CUDA index PyTorch has for it (the fix line "
                "names one, e.g. `--index-url https://download.pytorch.org/whl/cu130`)."),
    FindingKind("SD143", "torch", "PyTorch built for ROCm or another backend",
                "SageAttention needs a CUDA build of torch.",
                "Install a CUDA build of torch on an NVIDIA machine."),
    FindingKind("SD144", "torch", "PyTorch not built for this GPU",
                "Each CUDA build of torch carries kernels for a range of GPUs (PyTorch's CUDA "
                "matrix): cu126 spans sm50 to sm90, so Blackwell (RTX 50xx, B200) needs "
                "CUDA 12.8 or newer; cu128 (from torch 2.11), cu130 and cu132 start at Turing "
                "(sm75), and torch 2.15 has no cu126 build left.",
                "Install the same torch from the index the fix line names (a build whose "
                "arch list has this GPU), or use a GPU that torch serves."),
    FindingKind("SD145", "torch", "PyTorch too old",
                "SageAttention 2 needs torch 2.4 or newer (custom ops; Windows wheels start at "
                "2.5).",
                "Upgrade torch in the app's own way (its installer or lock file)."),
    FindingKind("SD146", "triton", "No Triton serves Turing with this torch",
                "An RTX 20xx (sm75) runs SageAttention only through Triton, and Triton dropped "
                "Turing in 3.3; torch 2.7 and newer need Triton 3.3 or newer. On Windows no "
                "triton-windows serves both.",
                "Use a torch 2.6 line (triton-windows 3.2) for this GPU, or an RTX 30xx or "
                "newer GPU."),
    FindingKind("SD147", "triton", "No triton-windows for this torch yet",
                "torch names the Triton minor it was built against; triton-windows has not "
                "released that minor yet, so nothing can be installed for this torch.",
                "Keep the newest torch the message names until triton-windows catches up, then "
                "`sagedoctor index refresh`."),
    FindingKind("SD148", "triton", "Turing GPU left out by this torch's Triton",
                "Beside newer GPUs, an RTX 20xx (sm75) cannot run the Triton this torch needs "
                "(Triton dropped Turing in 3.3); it stays on PyTorch attention.",
                "Nothing to do for the other GPUs; for this one, a torch 2.6 line."),
    FindingKind("SD149", "toolchain", "Compiler too old for torch's C++ standard",
                "torch 2.14 and newer require C++20 in their headers; a source build needs "
                "gcc 10 or newer and nvcc 12.0 or newer for that (the plan stops with SD206).",
                "Install gcc 10 or newer (and a CUDA 12+ toolkit) before building."),
    FindingKind("SD150", "triton", "Triton", "The Triton package that serves torch.", ""),
    FindingKind("SD151", "triton", "Triton missing",
                "`import sageattention` imports triton. On Linux torch pins triton itself; on "
                "Windows triton-windows must be added.",
                "Windows: `sagedoctor install` adds the matching triton-windows. Linux: "
                "reinstall torch so its pinned triton comes back."),
    FindingKind("SD152", "triton", "Triton does not match torch",
                "Each torch minor works only with one Triton minor (2.10/2.11 -> 3.6, 2.12/2.13 "
                "-> 3.7, ...).",
                "Install the Triton minor that torch expects (the fix line names it)."),
    FindingKind("SD153", "triton", "Plain `triton` on Windows",
                "The `triton` package from PyPI does not work on Windows; triton-windows "
                "provides the same module.",
                "`python -m pip uninstall -y triton`, then install triton-windows."),
    FindingKind("SD154", "triton", "Triton too new for Turing",
                "Triton 3.3 dropped Turing (sm75) support; torch 2.6 and older pair with "
                "triton-windows below 3.3.",
                "Install the triton-windows the fix line names: torch's pairing, which is below "
                "3.3 for these torch versions."),
    FindingKind("SD155", "sageattention", "DIFFUSERS_ATTN_BACKEND is set",
                "diffusers (0.40+) picks its attention backend from DIFFUSERS_ATTN_BACKEND: "
                "a sage* backend calls SageAttention itself for models on its dispatcher, with "
                "no first-call check (a mask raises); sagedoctor's start-up hook stands aside "
                "in a process started with it (one router at a time).",
                "Unset it to let the hook route only where verify proved a gain, or keep it "
                "and leave the hook off; in a script, `sage_scope()` routes one block."),
    FindingKind("SD160", "sageattention", "SageAttention", "The installed SageAttention.", ""),
    FindingKind("SD161", "sageattention", "SageAttention not installed",
                "SageAttention 2 is not in the target environment.",
                "`sagedoctor install --venv VENV`."),
    FindingKind("SD162", "sageattention", "SageAttention 1 installed",
                "`pip install sageattention` gives 1.x from PyPI: Triton-only, slower, without "
                "the SageAttention 2 kernels.",
                "`sagedoctor install` replaces it with SageAttention 2."),
    FindingKind("SD163", "sageattention", "SageAttention built for another torch or CUDA",
                "Its compiled modules were built for another CUDA major or torch version; they "
                "fail with 'DLL load failed' or 'undefined symbol'.",
                "`sagedoctor install` picks the build that matches this torch."),
    FindingKind("SD164", "sageattention", "Compiled module missing for this GPU",
                "The kernel this GPU needs (`_qattn_sm80/89/90`) or `_fused` is not in the "
                "package: calls fail with 'SMxx kernel is not available'.",
                "`sagedoctor install` reinstalls a build that covers this GPU."),
    FindingKind("SD165", "sageattention", "Stale SageAttention leftovers",
                "`python setup.py install` left a sageattention-*.egg or an easy-install.pth "
                "entry that can shadow the real install.",
                "`sagedoctor install --venv VENV` moves them aside (into the log folder), or "
                "delete the listed .egg folder and the sageattention line in easy-install.pth."),
    FindingKind("SD166", "sageattention", "SageAttention build not labelled",
                "A source build carries no +cuXXXtorchX.Y label, so its CUDA and torch cannot "
                "be checked from metadata; `sagedoctor verify` tests it.",
                "`sagedoctor verify --venv VENV`."),
    FindingKind("SD167", "sageattention", "sageattn() gives wrong output on this GPU",
                "`sagedoctor verify` ran `sageattn()` itself (the kernel it picks for the GPU) "
                "against SDPA and got wrong output, with no error: tag v2.2.0 and wheels built "
                "from it do this on Hopper (sm90). The router never uses such a kernel, but "
                "ComfyUI (--use-sage-attention), KJNodes' sage attention patch and diffusers' "
                "sage backend call `sageattn()` directly and produce garbage images.",
                "`sagedoctor install --venv VENV`: the plan replaces the build (Linux: a "
                "source build of the pinned commit; Windows: the fork's wheel)."),
    FindingKind("SD168", "sageattention", "Verification out of date",
                "The venv changed since `sagedoctor verify` last ran (another sageattention or "
                "torch), so what it found no longer says anything about this build. Where the "
                "start-up hook is enabled this is an error: the runtime keeps SageAttention off "
                "until a verify of the new build passes.",
                "`sagedoctor verify --venv VENV`."),
    FindingKind("SD169", "sageattention", "Not verified",
                "No readable record of a `sagedoctor verify` of this venv: nobody has proven "
                "that this SageAttention computes the right output on this GPU (a record that "
                "does not parse counts as none).",
                "`sagedoctor verify --venv VENV`."),
    FindingKind("SD170", "toolchain", "Build toolchain", "nvcc, gcc and ninja for source builds.",
                ""),
    FindingKind("SD171", "toolchain", "nvcc not found",
                "Linux installs build SageAttention from source and need the CUDA toolkit.",
                "Install the CUDA toolkit of torch's CUDA major and set CUDA_HOME."),
    FindingKind("SD172", "toolchain", "nvcc too old for this GPU",
                "Upstream needs nvcc 12.0+, 12.3+ for sm90, 12.4+ for sm89, 12.8+ for "
                "Blackwell.",
                "Install a newer CUDA toolkit and point CUDA_HOME at it."),
    FindingKind("SD173", "toolchain", "nvcc of another CUDA major than torch",
                "torch's extension builder refuses an nvcc whose CUDA major differs from "
                "torch's.",
                "Install the CUDA toolkit matching torch's CUDA major; set CUDA_HOME."),
    FindingKind("SD174", "toolchain", "gcc or ninja missing",
                "A source build needs a C++ compiler; ninja makes it much faster.",
                "Install gcc and g++ from the OS (e.g. `sudo apt install build-essential`); "
                "ninja needs nothing: a source build installs its own."),
    FindingKind("SD175", "toolchain", "CUDA_HOME candidate passed over",
                "A CUDA_HOME candidate (CUDA_HOME, CUDA_PATH, the folder of nvcc on PATH, "
                "/usr/local/cuda, /usr/local/cuda-*) lacks bin/nvcc or "
                "include/cuda_runtime.h, so it is not used for builds; the next complete one "
                "is.",
                "Point CUDA_HOME at a complete CUDA toolkit, or unset it."),
    FindingKind("SD176", "toolchain", "nvcc found, but no CUDA toolkit",
                "An nvcc was found, but no folder holds both bin/nvcc and "
                "include/cuda_runtime.h (a wrapper such as /usr/local/bin/nvcc): a build "
                "would fail on the missing headers.",
                "Install the CUDA toolkit (with its headers) of torch's CUDA major and set "
                "CUDA_HOME to it."),
    FindingKind("SD180", "invokeai", "InvokeAI", "The InvokeAI install and its settings.", ""),
    FindingKind("SD181", "invokeai", "InvokeAI not found",
                "No InvokeAI root was found (--root, INVOKEAI_ROOT, the venv's parent, "
                "~/invokeai). That is fine for ComfyUI or scripts.",
                "Pass --root DIR if InvokeAI lives elsewhere."),
    FindingKind("SD182", "invokeai", "InvokeAI has no attention_backend setting",
                "This InvokeAI's config class does not declare attention_backend, so it cannot "
                "be switched on in invokeai.yaml.",
                "`sagedoctor enable` uses the venv start-up hook instead."),
    FindingKind("SD183", "invokeai", "invokeai.yaml unreadable",
                "The file could not be read or parsed.",
                "Fix or move the file; InvokeAI rewrites a default one at start."),
    FindingKind("SD184", "invokeai", "invokeai.yaml sets a key this InvokeAI rejects",
                "attention_backend is set, but this InvokeAI forbids unknown keys and will "
                "refuse to start ('Failed to load config file').",
                "Remove the attention_backend line from invokeai.yaml."),
    FindingKind("SD185", "invokeai", "invokeai.yaml sets attention_type: sliced",
                "With sliced attention the SD1.5/SDXL pipeline never calls PyTorch's SDPA, so "
                "routing it to SageAttention can do nothing there.",
                "Set `attention_type: auto` (or `torch-sdp`) in invokeai.yaml, or remove the "
                "line."),
    FindingKind("SD186", "invokeai", "Not an InvokeAI root",
                "The folder named by --root or INVOKEAI_ROOT holds none of InvokeAI's marks "
                "(invokeai.yaml, the launcher's .first_run or .launcher-bootstrap/, the "
                "invokeai package in its .venv), so nothing there is treated as InvokeAI.",
                "Pass --root the folder that holds invokeai.yaml (or unset INVOKEAI_ROOT)."),
    FindingKind("SD187", "invokeai", "InvokeAI launcher update not verified",
                "The launcher's `.first_run` marker says it installed or updated InvokeAI and "
                "InvokeAI has not started since; no verify came after it. An update can "
                "replace torch in place, which breaks a SageAttention build made for the old "
                "one.",
                "`sagedoctor post-update --venv VENV` before starting InvokeAI."),
    FindingKind("SD188", "invokeai", "InvokeAI launcher changed the venv after the last verify",
                "The launcher rewrote `.launcher-bootstrap/` (the release's uv.lock, applied "
                "with `uv sync --inexact --frozen`) after the last verify: torch may have been "
                "replaced.",
                "`sagedoctor post-update --venv VENV`."),
    FindingKind("SD189", "invokeai", "InvokeAI's attention_backend choices unreadable",
                "This InvokeAI declares attention_backend, but its type names no choices "
                "sagedoctor can read from the source (an enum, a type from another module): "
                "the SageAttention value is not guessed, so nothing is written to "
                "invokeai.yaml.",
                "`sagedoctor enable` uses the venv start-up hook; or set the value by hand "
                "from InvokeAI's docs."),
    FindingKind("SD220", "comfyui", "ComfyUI",
                "The ComfyUI install: its layout, version, the Python it runs and whether it "
                "has the --use-sage-attention flag.", ""),
    FindingKind("SD221", "comfyui", "ComfyUI not found",
                "No ComfyUI was found (--comfyui DIR, the folder of the target's venv or "
                "python_embeded, ComfyUI Desktop's config.json). That is fine for InvokeAI or "
                "scripts.",
                "Pass --comfyui DIR: the ComfyUI_windows_portable folder, Desktop's base path "
                "or the git clone."),
    FindingKind("SD222", "comfyui", "ComfyUI runs a sageattn() that verify found wrong",
                "ComfyUI is started with --use-sage-attention (a portable .bat file or "
                "Desktop's launch settings), so it calls `sageattn()` for every attention, and "
                "`sagedoctor verify` found `sageattn()` giving wrong output on this GPU: "
                "garbage images, no error.",
                "`sagedoctor install --comfyui DIR` replaces the build; until then start "
                "ComfyUI without the flag."),
    FindingKind("SD223", "comfyui", "--use-sage-attention makes ComfyUI slower here",
                "ComfyUI is started with --use-sage-attention, but verify found no "
                "SageAttention kernel faster than SDPA on this GPU at the shapes it measured: "
                "the flag routes every call anyway.",
                "Remove the flag; `sagedoctor enable --comfyui DIR` routes only where verify "
                "proved a gain."),
    FindingKind("SD224", "comfyui", "ComfyUI too old for --use-sage-attention",
                "A launcher passes --use-sage-attention, but this ComfyUI's comfy/cli_args.py "
                "does not declare it, so ComfyUI stops at start ('unrecognized arguments').",
                "Update ComfyUI (update/update_comfyui.bat), or remove the flag."),
    FindingKind("SD225", "comfyui", "Embedded Python does not import site",
                "The portable build's python3XX._pth governs sys.path; without an `import "
                "site` line Python never runs the .pth files in site-packages, so the "
                "start-up hook (`sagedoctor enable`) cannot run there.",
                "Add a line `import site` to the ._pth file (the portable build ships it), "
                "or start ComfyUI with --use-sage-attention instead."),
    FindingKind("SD228", "comfyui", "Embedded Python cannot import its site-packages",
                "The ._pth file neither has an `import site` line nor lists site-packages, so "
                "nothing installed there (SageAttention, triton, the runtime) can be "
                "imported: an install could not work.",
                "Add the line `import site` to the ._pth file (the portable build ships it), "
                "then run sagedoctor again."),
    FindingKind("SD226", "comfyui", "ComfyUI install incomplete",
                "The ComfyUI layout was found, but a part sagedoctor needs is missing (its "
                "Python, the ._pth file, a venv).",
                "Repair the install, or pass the interpreter that starts ComfyUI with "
                "--python EXE."),
    FindingKind("SD227", "comfyui", "ComfyUI found, another Python inspected",
                "A ComfyUI install was found, but the target of this run is another "
                "interpreter (InvokeAI's, --venv or --python).",
                "`sagedoctor check --comfyui DIR` inspects ComfyUI's own Python."),
    FindingKind("SD201", "sageattention", "No SageAttention wheel for this combination",
                "No Windows wheel in the index serves this torch, CUDA major and Python. "
                "There are none for torch < 2.5, CUDA 11 or CPU torch; post5 and post6 need "
                "Python 3.10 or newer.",
                "Install a torch the index covers (docs: wheel-selection.md), or run "
                "`sagedoctor index refresh` for newer wheels."),
    FindingKind("SD202", "triton", "No known triton-windows for this torch",
                "The index has no triton-windows pairing for this torch minor.",
                "Run `sagedoctor index refresh`, or pass an index that pairs it with --index."),
    FindingKind("SD206", "toolchain", "Compiler cannot build for this torch's C++ standard",
                "torch 2.14 and newer require C++20 in their headers (ATen.h stops with "
                "'#error C++20 or later compatible compiler is required'); gcc needs 10 or "
                "newer and nvcc 12.0 or newer for that.",
                "Install gcc 10 or newer (and a CUDA 12+ toolkit), then run again."),
    FindingKind("SD203", "sageattention", "GPU needs a source build on Windows",
                "The Windows wheels carry no kernels for this GPU (sm100 and sm121 are not "
                "bundled; sm120 needs a CUDA 12.8 or newer wheel).",
                "Build the woct0rdho fork from source (docs: wheel-selection.md), or use Linux."),
    FindingKind("SD204", "toolchain", "Cannot build from source here",
                "A Linux install builds SageAttention, and a tool it needs is missing or too "
                "old.",
                "Install the CUDA toolkit of torch's CUDA major and gcc, then run again."),
    FindingKind("SD205", "gpu", "No GPU to build for",
                "None of the NVIDIA GPUs has an architecture upstream SageAttention builds "
                "(8.0, 8.6, 8.9, 9.0, 10.0, 12.0, 12.1).",
                "Use a GPU of one of those architectures; for another, build SageAttention "
                "yourself (a build `check` finds nothing wrong with is kept as it is)."),
    FindingKind("SD191", "sageattention", "SDPA-routing runtime not installed",
                "The venv lacks the sagedoctor-runtime this sagedoctor bundles (or has another "
                "version): nothing routes the app's attention to SageAttention, and `sagedoctor "
                "install` would add it.",
                "`sagedoctor install --venv VENV`."),
    FindingKind("SD192", "sageattention", "Installed wheel has a known problem",
                "The index lists a problem with the installed SageAttention wheel (for example "
                "NaN output in post5); the plan replaces it with a wheel without one.",
                "`sagedoctor install --venv VENV`."),
    FindingKind("SD193", "invokeai", "InvokeAI not switched to SageAttention",
                "This InvokeAI has an attention_backend setting with a SageAttention choice, "
                "and invokeai.yaml does not select it: `sagedoctor install` sets it.",
                "`sagedoctor install --venv VENV`."),
    FindingKind("SD135", "python", "A record of sagedoctor in the venv is not a file",
                "What the install writes after its commit (<venv>/sagedoctor/installed.json, "
                "invokeai-edit.json) is a folder, FIFO, device or socket there: the record "
                "could not be written, and uninstall would not know what the install put in. "
                "Found before any download.",
                "Move the named path away (it is not sagedoctor's file), then run again."),
    FindingKind("SD194", "invokeai", "Which switch routes InvokeAI",
                "InvokeAI has a SageAttention switch of its own (attention_backend) and "
                "sagedoctor has its start-up hook: one router at a time. While InvokeAI's is "
                "on, the hook stands aside. The better one here: InvokeAI's where its kernel "
                "table serves every GPU, sagedoctor's where it has none (sm75, sm87, sm103, "
                "sm110) and InvokeAI would stay on SDPA.",
                "`sagedoctor plan` says which it sets up (the install sets InvokeAI's back to "
                "auto where the hook is the better one); `--use app|sagedoctor` overrides."),
    FindingKind("SD136", "python", "Start-up hook file is not a file",
                "Something at the start-up hook's path (sagedoctor-runtime.pth in "
                "site-packages) is no file: a folder is skipped by every Python of the venv, "
                "so the hook is off though `enable` ran; a FIFO there hangs each start.",
                "`sagedoctor disable --venv VENV` removes it; `sagedoctor enable` then "
                "writes the hook."),
    FindingKind("SD195", "invokeai", "invokeai.yaml not writable",
                "The install's edit step writes invokeai.yaml atomically beside a backup: the "
                "file and its folder must be writable by this user. Found before any download.",
                "Run as the user who owns the InvokeAI root, or fix its permissions."),
    FindingKind("SD196", "invokeai", "InvokeAI is running",
                "`invokeai-web` of the target venv (or root) runs: its files are in use, and "
                "it rewrites invokeai.yaml from its settings page. Found before any download.",
                "Stop InvokeAI, then run the install again."),
    FindingKind("SD197", "invokeai", "invokeai.yaml edit outside an InvokeAI root",
                "The folder the edit step would write invokeai.yaml into holds no InvokeAI "
                "root marker (invokeai.yaml, .venv, databases, models).",
                "Pass --root with the folder InvokeAI uses (INVOKEAI_ROOT), or leave --root "
                "out."),
    FindingKind("SD198", "system", "Not enough disk space",
                "A source build needs about 3 GiB in the temporary folder; the venv and the "
                "backups of what is replaced about 0.5 GiB each. Found before any download.",
                "Free space (or point TMPDIR at a larger disk), then run again."),
    FindingKind("SD199", "python", "Interrupted install not rolled back yet",
                "A `sagedoctor install` was killed (SIGKILL, a power cut) and left its journal: "
                "the venv may be half-installed, and the next install rolls it back first. "
                "`verify`, `enable` and `post-update` refuse to arm the runtime until then.",
                "`sagedoctor install --venv VENV` (it rolls the venv back first) or "
                "`sagedoctor uninstall --venv VENV`."),
    FindingKind("SD229", "comfyui", "Which switch routes ComfyUI",
                "ComfyUI's own switches (--use-sage-attention: `sageattn()` for every unmasked "
                "call, with no check; --use-ck-attention: Comfy Kitchen's INT8 attention) beside "
                "sagedoctor's start-up hook: one router at a time, so the hook stands aside in "
                "a ComfyUI started with --use-sage-attention.",
                "Keep one: remove the flag from the launcher to let the hook route only where "
                "verify proved a gain, or `sagedoctor disable` to keep the flag's."),
    FindingKind("SD230", "comfyui", "Both --use-sage-attention and --use-ck-attention",
                "A launcher passes both flags; ComfyUI declares them mutually exclusive, so it "
                "does not start from that launcher.",
                "Remove one of the two flags from the launcher."),
    FindingKind("SD190", "*", "Could not check",
                "A probe failed or timed out; its areas were not checked.",
                "Run with -v for details; the message names the failing step."),
]

CATALOG: dict[str, FindingKind] = {kind.code: kind for kind in _KINDS}


# --- error codes: a failure that stops a command (SagedoctorError), not a finding --------------

@dataclass(frozen=True)
class ErrorKind:
    code: str
    title: str
    exit_status: int  # the CLI's exit status for it (sagedoctor/exit_codes.py)


_FIXABLE, _FAILED = exit_codes.FIXABLE, exit_codes.TOOL_FAILED
_ERROR_KINDS = [
    ErrorKind("SD000", "A failure without a code of its own", _FAILED),
    ErrorKind("SD199", CATALOG["SD199"].title, _FIXABLE),  # the finding, raised by install
    ErrorKind("SD901", "Facts file unusable", _FAILED),
    ErrorKind("SD902", "Target cannot be inspected", _FIXABLE),
    ErrorKind("SD903", "Wheel index invalid", _FAILED),
    ErrorKind("SD904", "Index refresh failed", _FAILED),
    ErrorKind("SD905", "Setting unusable", exit_codes.USAGE),
    ErrorKind("SD910", "An install step failed", _FAILED),
    ErrorKind("SD911", "Another install holds the venv's lock", _FAILED),
    ErrorKind("SD912", "Install stopped by a signal", exit_codes.INTERRUPTED),
    ErrorKind("SD913", "Rollback incomplete", _FAILED),
    ErrorKind("SD914", "An interrupted install was recovered first", _FAILED),
    ErrorKind("SD915", "Not in the cache (--offline)", _FAILED),
    ErrorKind("SD916", "Download refused", _FAILED),
    ErrorKind("SD917", "Wheel refused", _FAILED),
    ErrorKind("SD918", "Smoke check failed", _FAILED),
    ErrorKind("SD919", "The venv changed after the plan", _FAILED),
    ErrorKind("SD920", "Self-test failed to run or report", _FAILED),
    ErrorKind("SD921", "Download damaged", _FAILED),
    ErrorKind("SD922", "No space left on the disk", _FAILED),
    ErrorKind("SD923", "Standard output went away", _FAILED),
    ErrorKind("SD924", "Standard output could not be written", _FAILED),
    ErrorKind("SD930", "No passing verify to enable", _FIXABLE),
    ErrorKind("SD931", "Install refused by its preflight", _FIXABLE),
    ErrorKind("SD932", "Not writable by this user", _FIXABLE),
    ErrorKind("SD941", "InvokeAI is running", _FAILED),
    ErrorKind("SD942", "invokeai.yaml unusable", _FAILED),
    ErrorKind("SD943", "InvokeAI rejects the edited settings", _FAILED),
    ErrorKind("SD950", "The venv to repair cannot be inspected", _FIXABLE),
    ErrorKind("SD951", "A repair needs confirmation", _FAILED),
    ErrorKind("SD952", "The repair failed", _FAILED),
    ErrorKind("SD970", "Install cancelled in the TUI", exit_codes.INTERRUPTED),
    ErrorKind("SD971", "TUI cannot switch InvokeAI", _FAILED),
]

# The error classes (SagedoctorError subclasses) name their entry here and take its exit
# status from it (errors.SagedoctorError.__init_subclass__).
ERRORS: dict[str, ErrorKind] = {kind.code: kind for kind in _ERROR_KINDS}


def finding(
    code: str,
    severity: str,
    detail: str = "",
    fix: str | None = None,
    *,
    title: str | None = None,
    fatal: bool = False,
    area: str | None = None,
) -> Finding:
    kind = CATALOG[code]
    return Finding(
        code=code,
        area=area or kind.area,
        severity=severity,
        title=title or kind.title,
        detail=detail,
        fix=kind.fix if fix is None else fix,
        fatal=fatal,
    )


def exit_code(findings: Iterable[Finding]) -> int:
    """0 ready, 1 fixable problems, 2 cannot work on this machine."""
    items = list(findings)
    if any(f.fatal for f in items):
        return 2
    if any(f.severity == "error" for f in items):
        return 1
    return 0
