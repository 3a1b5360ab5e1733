#!/usr/bin/env bash
# Elastic Chat set-up for Linux (and macOS, demo only).
#
#   installer/setup.sh            create .venv, install the app, add a desktop launcher, start the app
#   installer/setup.sh --test     the same set-up with the test extras, then the linter (ruff) and the
#                                 whole test suite (extra arguments go to pytest, e.g. -m "not slow" for
#                                 the quick loop; no launcher is made)
#   installer/setup.sh --uninstall [--purge]
#                                 remove the launchers and .venv; chats, settings and downloaded models
#                                 stay unless --purge is given, which deletes only the data folder the
#                                 app names itself (runtime/paths.py), never one it did not name
#
# Idempotent: a second run reuses .venv and skips pip when nothing changed.
# torch: the CUDA build on a machine with an NVIDIA GPU (PyPI's default Linux wheel),
# the CPU build otherwise (PyTorch's CPU index; falls back to any local CPU wheel pip knows).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
TORCH_VERSION="2.13.0"
MODE="app"
if [[ "${1:-}" == "--test" ]]; then
    MODE="test"
    shift
fi

say() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

# The app's folders, as the app itself says (runtime/paths.py, the rules the app runs on; any Python 3
# will do, so this works when .venv is gone): "remove<TAB>folder" or "keep<TAB>folder<TAB>why" lines.
ask_purgeable() {
    local py
    for py in "$VENV/bin/python" python3 python; do
        if [[ -x "$py" ]] || command -v "$py" >/dev/null 2>&1; then
            "$py" -I "$ROOT/runtime/paths.py" --purgeable 2>/dev/null && return 0
        fi
    done
    return 1
}

if [[ "${1:-}" == "--uninstall" ]]; then
    purge="no"
    [[ "${2:-}" == "--purge" ]] && purge="yes"
    answer=""
    asked="no"
    if answer="$(ask_purgeable)"; then asked="yes"; fi  # before .venv goes: its Python is the first asked
    for entry in "${XDG_DATA_HOME:-$HOME/.local/share}/applications/elastic-chat.desktop" \
                 "$HOME/Desktop/elastic-chat.desktop"; do
        [[ -f "$entry" ]] && rm -f "$entry" && say "removed $entry"
    done
    if [[ -x "$VENV/bin/python" ]]; then
        "$VENV/bin/python" -m app.launcher uninstall >/dev/null 2>&1 || true
    fi
    rm -rf "$VENV" && say "removed $VENV"
    if [[ "$asked" == "no" ]]; then
        say "could not ask Elastic Chat where it keeps your chats (no Python found); nothing of yours was removed"
        exit 0
    fi
    [[ -n "$answer" ]] || say "Elastic Chat has no chats, settings or downloaded models here to remove"
    while IFS=$'\t' read -r verdict folder why; do
        [[ -n "$folder" ]] || continue
        if [[ "$purge" == "yes" && "$verdict" == "remove" ]]; then
            rm -rf -- "$folder" && say "removed your chats, settings and downloaded models in $folder"
        elif [[ "$verdict" == "remove" ]]; then
            say "kept your chats, settings and downloaded models in $folder (add --purge to remove them)"
        else
            say "kept $folder: ${why:-not a folder the app uses for itself}"
        fi
    done <<<"$answer"
    exit 0
fi

find_python() {
    for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
        [[ -n "$candidate" ]] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    die "Python 3.11 or newer is needed (set PYTHON=/path/to/python3.11 if it is installed elsewhere)"
}

has_nvidia_gpu() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

if [[ ! -x "$VENV/bin/python" ]]; then
    PY="$(find_python)"
    say "creating $VENV with $PY"
    "$PY" -m venv "$VENV" || die "could not create the virtual environment (on Debian/Ubuntu: apt install python3-venv)"
fi
VPY="$VENV/bin/python"

CPU_INDEX="https://download.pytorch.org/whl/cpu"
reachable() {
    "$VPY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)" "$1" >/dev/null 2>&1
}

if has_nvidia_gpu; then
    TORCH_KIND="cuda"
    TORCH_ARGS=()
else
    TORCH_KIND="cpu"
    TORCH_ARGS=()
fi

# Skip pip when this exact set-up was already done (same pyproject, same mode, same torch kind).
STAMP="$VENV/.elastic-chat-setup"
WANT="$(cat "$ROOT/pyproject.toml" "$ROOT/installer/setup.sh" | sha256sum | cut -c1-16) $MODE $TORCH_KIND"
if [[ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]]; then
    if ! "$VPY" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
        if [[ "$TORCH_KIND" == "cpu" ]]; then
            # PyTorch's CPU index keeps a no-GPU install small; pip would retry an unreachable
            # index for every package, so ask it only when it answers.
            if reachable "$CPU_INDEX/torch/"; then
                TORCH_ARGS=(--extra-index-url "$CPU_INDEX")
            else
                say "PyTorch's CPU package index is unreachable; taking torch from the default index"
            fi
        fi
        say "installing torch $TORCH_VERSION ($TORCH_KIND build)"
        "$VPY" -m pip install --quiet "torch==$TORCH_VERSION" "${TORCH_ARGS[@]}" ||
            die "installing torch failed; check the network and run this script again (it resumes)"
    fi
    EXTRAS=()
    [[ "$MODE" == "test" ]] && EXTRAS+=(test)
    [[ "$TORCH_KIND" == "cuda" ]] && EXTRAS+=(gpu)  # triton: the fused NVFP4/FP8 kernels
    EXTRA=""
    (( ${#EXTRAS[@]} )) && EXTRA="[$(IFS=,; echo "${EXTRAS[*]}")]"
    say "installing Elastic Chat$EXTRA"
    "$VPY" -m pip install --quiet -e "$ROOT$EXTRA" ||
        die "installing the app failed; check the network and run this script again"
    echo "$WANT" >"$STAMP"
fi

cd "$ROOT"
if [[ "$MODE" == "test" ]]; then
    # The launcher test validates the .desktop file with Debian's desktop-file-utils; on a CI
    # machine (root, apt) fetch it, elsewhere that one test is skipped and says why.
    if ! command -v desktop-file-validate >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 &&
        [[ "$(id -u)" == "0" ]]; then
        apt-get install -y -q desktop-file-utils >/dev/null 2>&1 || say "could not install desktop-file-utils"
    fi
    export QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}"
    export HF_HUB_OFFLINE=1
    say "checking the code with ruff (its rules: pyproject.toml's [tool.ruff])"
    "$VPY" -m ruff check "$ROOT" || die "ruff found the problems listed above; fix them, then run the tests again"
    exec "$VPY" -m pytest "$@"
fi
if [[ "$(uname -s)" == "Linux" ]]; then
    "$VPY" -m app.launcher install >&2 || say "could not create the desktop launcher (the app still runs)"
fi
exec "$VENV/bin/elastic-chat" "$@"
