#!/bin/bash
# Copyright 2026 The Cyborg Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

# Run phases of the cyborg devstack plugin as stack.sh, unstack.sh and
# clean.sh would, with devstack's own functions (vendor/devstack) and
# stand-ins for what changes a machine: system commands (stub.sh under
# their names at the head of PATH) and the devstack functions that install
# packages or start services, each recording its call in $STUB_LOG.
#
# Usage: harness.sh PHASE...
#   PHASE: pre-install, install, post-config, extra, test-config, unstack
#   or clean.
#
# Environment:
#   HARNESS_ROOT      an empty directory; everything is written under it
#   CYBORG_REPO       the cyborg checkout whose plugin runs
#   ENABLED_SERVICES  the node's services, as in local.conf
#   LOCAL_CONF        optional: a local.conf whose meta sections are merged
#                     where stack.sh merges them
#   Any other devstack variable (RABBIT_HOST, CYBORG_USE_UWSGI, ...).

set -o errexit

HARNESS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOP_DIR=$HARNESS_DIR/vendor/devstack
: "${HARNESS_ROOT:?}" "${CYBORG_REPO:?}"
export HARNESS_ROOT
export STUB_LOG=${STUB_LOG:-$HARNESS_ROOT/calls.log}

# System commands: recorded, never run.
mkdir -p $HARNESS_ROOT/bin
for command in sudo apt-get systemctl openstack mysql psql createdb curl uwsgi \
        a2ensite a2dissite a2enmod a2query systemd-tmpfiles git; do
    ln -sf $HARNESS_DIR/stub.sh $HARNESS_ROOT/bin/$command
done
export PATH=$HARNESS_ROOT/bin:$PATH
# devstack's global virtualenv (its default), holding cyborg's commands.
GLOBAL_VENV=True
DEVSTACK_VENV=$HARNESS_ROOT/venv
mkdir -p $DEVSTACK_VENV/bin
for command in cyborg-dbsync cyborg-api cyborg-conductor cyborg-agent; do
    ln -sf $HARNESS_DIR/stub.sh $DEVSTACK_VENV/bin/$command
done

# What stackrc and stack.sh would have set, with every path in HARNESS_ROOT.
DEST=$HARNESS_ROOT/opt/stack
DATA_DIR=$DEST/data
mkdir -p $DEST $DATA_DIR
os_VENDOR=Debian
os_PACKAGE=deb
os_RELEASE=12
DISTRO=bookworm
STACK_USER=$(id -un)
HOST_IP=${HOST_IP:-192.0.2.10}
SERVICE_HOST=${SERVICE_HOST:-$HOST_IP}
SERVICE_LOCAL_HOST=127.0.0.1
SERVICE_PROTOCOL=http
SERVICE_IP_VERSION=4
SERVICE_PASSWORD=service-secret
SERVICE_TIMEOUT=5
REGION_NAME=RegionOne
API_WORKERS=${API_WORKERS:-2}
WORKER_TIMEOUT=80
ENABLE_DEBUG_LOG_LEVEL=True
LOG_COLOR=False
GIT_BASE=https://opendev.org
SYSTEMCTL=systemctl
DATABASE_PASSWORD=database-secret
RABBIT_PASSWORD=rabbit-secret
APACHE_CONF_DIR=$HARNESS_ROOT/etc/apache2/sites-available
CYBORG_CONF_DIR=${CYBORG_CONF_DIR:-$HARNESS_ROOT/etc/cyborg}
NOVA_CONF=$HARNESS_ROOT/etc/nova/nova.conf
TEMPEST_CONFIG=$HARNESS_ROOT/opt/stack/tempest/etc/tempest.conf
PYTHON=${PYTHON:-python3}
mkdir -p $APACHE_CONF_DIR $(dirname $NOVA_CONF) $(dirname $TEMPEST_CONFIG)

source $TOP_DIR/functions
source $TOP_DIR/lib/apache
source $TOP_DIR/lib/keystone
source $TOP_DIR/lib/rpc_backend
source $TOP_DIR/lib/database
# As stack.sh: the database service enabled here, if any, and its URL.
if initialize_database_backends; then
    define_database_baseurl
fi

# Devstack functions that install or run things: recorded, never run.
function record {
    echo "$*" >> $STUB_LOG
}
for function_name in setup_develop setup_dev_lib pip_install pip_install_gr \
        git_clone git_clone_by_name run_process stop_process; do
    eval "function $function_name { record $function_name \"\$@\"; }"
done

# The plugin, checked out under a name of the operator's choosing.
PLUGIN_NAME=${PLUGIN_NAME:-cyborg-checkout}
ln -sfn $CYBORG_REPO $DEST/$PLUGIN_NAME
enable_plugin $PLUGIN_NAME file://$CYBORG_REPO
run_phase source

for phase in "$@"; do
    echo "=== $phase" >> $STUB_LOG
    case $phase in
        pre-install|install)
            run_phase stack $phase
            ;;
        post-config)
            run_phase stack post-config
            merge_config_group ${LOCAL_CONF:-} post-config
            ;;
        extra)
            merge_config_group ${LOCAL_CONF:-} extra
            run_phase stack extra
            ;;
        test-config)
            run_phase stack test-config
            merge_config_group ${LOCAL_CONF:-} test-config
            ;;
        unstack|clean)
            run_phase $phase
            ;;
        *)
            die $LINENO "unknown phase $phase"
            ;;
    esac
done

# What the plugin defined, for the tests.
for name in ENABLED_SERVICES CYBORG_CONF CYBORG_CONF_FILE CYBORG_DIR CYBORG_UWSGI_CONF \
        CYBORG_API_URL CYBORG_STATE_PATH; do
    echo "$name=${!name}"
done > $HARNESS_ROOT/variables
