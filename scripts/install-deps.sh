#!/usr/bin/env bash
# Installs the Debian 12 packages dtrain needs, if any are missing. Idempotent:
# when everything is present it changes nothing and needs no root.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libdnnl-dev zlib1g-dev libjansson-dev
      libopenmpi-dev openmpi-bin dataset-fashion-mnist fortunes iproute2 python3-numpy chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=sudo
  else
    echo "install-deps: these packages are missing and installing them needs root: ${missing[*]}" >&2
    echo "install-deps: run 'sudo apt-get install ${missing[*]}' (or run make as root) and try again" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
