#!/usr/bin/env bash
# Install the system services the functional tests start privately:
# PostgreSQL, MariaDB and RabbitMQ, and what building uWSGI (a test
# requirement) needs: a C compiler and the Python headers. Needs root (or
# sudo) and apt.
set -euo pipefail

packages=(postgresql mariadb-server rabbitmq-server build-essential python3-dev)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null \
        | grep -q "install ok installed" || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
