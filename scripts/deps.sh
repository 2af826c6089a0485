#!/usr/bin/env bash
# Installs (as root) or names (otherwise) the Debian packages spindle needs.
# Usage: scripts/deps.sh [build|bench|check]
set -euo pipefail
what=${1:-build}

pkgs=(cmake ninja-build g++ libgtest-dev)
case $what in
  bench) pkgs+=(libboost-context-dev libboost-fiber-dev libleveldb-dev python3 python3-matplotlib) ;;
  check) pkgs+=(python3 python3-matplotlib clang-19 libclang-rt-19-dev libboost-context-dev libboost-fiber-dev libleveldb-dev g++-aarch64-linux-gnu qemu-user
                xz-utils zstd) ;;  # xz, zstd: scripts/preload-real-programs.sh
  build) pkgs+=(libboost-context-dev libboost-fiber-dev libleveldb-dev) ;;
  *) echo "deps.sh: unknown set '$what' (build, bench or check)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -eq 0 ]]; then
  echo "spindle: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "spindle: missing Debian packages. Install them with:" >&2
  echo "  sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
