#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test ampprobe (needs root or sudo).
set -euo pipefail
pkgs=(cmake gcc make pkg-config check libsubunit-dev libsqlite3-dev libncurses-dev sqlite3 tmux python3 chromium)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
