#!/usr/bin/env bash
# Make sure this machine can build Beacon's virtualenv: Python 3.11 with venv and pip.
# On a fresh Debian 12, python3-venv is a separate package; as root we install it.
set -euo pipefail
PYTHON=${PYTHON:-python3}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  missing="python3"
elif ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing="python3-venv"
else
  missing=""
fi
version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
if [ -n "$version" ] && [ "$version" != "3.11" ]; then
  echo "bootstrap: Beacon needs Python 3.11 (found $version at $(command -v "$PYTHON"))." \
       "Set PYTHON=/path/to/python3.11." >&2
  exit 1
fi
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing $missing python3-pip with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -q
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
      python3 python3-venv python3-pip ca-certificates
  else
    echo "bootstrap: $missing is missing; install it (Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
fi
# python-ldap (for django-auth-ldap) has no wheel: it compiles against the LDAP and SASL headers.
if [ ! -f /usr/include/lber.h ] || [ ! -f /usr/include/sasl/sasl.h ] || ! command -v gcc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing gcc libldap2-dev libsasl2-dev with apt-get (python-ldap builds from source)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -q
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends gcc libc6-dev \
      libldap2-dev libsasl2-dev
  else
    echo "bootstrap: python-ldap needs gcc, libldap2-dev and libsasl2-dev; install them" >&2
    exit 1
  fi
fi
