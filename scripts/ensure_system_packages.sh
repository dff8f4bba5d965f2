#!/usr/bin/env bash
# Debian packages the tests need (Chromium for browser tests, Prometheus for metering tests,
# zsh for the command line's completion script), installed only when missing. Needs root (CI and these machines run as root).
set -u
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v zsh >/dev/null 2>&1 || missing+=(zsh)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "Missing system packages: ${missing[*]}. Install them (apt-get install ${missing[*]})." >&2
  exit 1
fi
echo "Installing ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# prometheus' package starts a system service on :9090 where an init system exists; tests run
# their own instance on a loopback port of their choosing, so the service is not needed.
exit 0
