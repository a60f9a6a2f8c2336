#!/usr/bin/env bash
# Installs what agoq needs to build, test and run, from Debian's packages (see docs/dependencies.md for why each
# one is here). Usage: scripts/install-deps.sh [--test | --sanitize]   (--test adds PyTorch for the parity test,
# --sanitize clang and its sanitizer and libFuzzer runtimes for scripts/sanitize.sh). --test also makes .venv: the
# pinned PyPI references of the import tests (scripts/test-requirements.txt) over Debian's torch and numpy.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config libopenblas-openmp-dev libopenmpi-dev openmpi-bin
      libsentencepiece-dev libdnnl-dev nlohmann-json3-dev libcli11-dev libgtest-dev zlib1g-dev libxxhash-dev libpcre2-dev
      libutf8proc-dev libprotobuf-dev protobuf-compiler libisal-dev python3 python3-matplotlib iproute2)
[ "${1:-}" = "--test" ] && pkgs+=(python3-torch python3-numpy python3-venv)
[ "${1:-}" = "--sanitize" ] && pkgs+=(clang libclang-rt-14-dev libomp-14-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "${1:-}" = "--test" ]; then
  cd "$(dirname "$0")/.."
  req=scripts/test-requirements.txt nodeps=scripts/test-requirements-nodeps.txt  # (the second: see its comment)
  if ! cat "$req" "$nodeps" | cmp -s - .venv/requirements.txt 2>/dev/null; then
    echo "install-deps: making .venv ($req, $nodeps)"
    rm -rf .venv
    /usr/bin/python3 -m venv --system-site-packages .venv
    .venv/bin/pip install -q --disable-pip-version-check -r "$req"
    .venv/bin/pip install -q --disable-pip-version-check --no-deps -r "$nodeps"
    cat "$req" "$nodeps" > .venv/requirements.txt
  fi
fi
