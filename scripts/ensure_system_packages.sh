#!/usr/bin/env bash
# Debian packages, installed only when missing. Needs root (CI and these machines run as root).
#   ensure_system_packages.sh build   what `pip install -r requirements.txt` needs to build
#                                     python-ldap (no wheels on PyPI): the OpenLDAP and SASL
#                                     headers and a C compiler (the Makefile runs this first)
#   ensure_system_packages.sh         those, and what the tests need: Chromium (browser tests),
#                                     Prometheus (metering tests), slapd and ldap-utils (the LDAP
#                                     sign-in tests run their own slapd), zsh (the command line's
#                                     completion script is tested in it)
set -u
missing=()
[ -f /usr/include/ldap.h ] || missing+=(libldap2-dev)
[ -f /usr/include/sasl/sasl.h ] || missing+=(libsasl2-dev)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
if [ "${1:-}" != build ]; then
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
  [ -x /usr/sbin/slapd ] || command -v slapd >/dev/null 2>&1 || missing+=(slapd)
  command -v ldapsearch >/dev/null 2>&1 || missing+=(ldap-utils)
  command -v zsh >/dev/null 2>&1 || missing+=(zsh)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "Missing system packages: ${missing[*]}. Install them (apt-get install ${missing[*]})." >&2
  exit 1
fi
echo "Installing ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# prometheus' and slapd's packages start system services (:9090, :389) where an init system
# exists; the tests run their own instances on loopback ports of their choosing, so those
# services are not needed.
exit 0
