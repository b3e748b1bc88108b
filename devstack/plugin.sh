#!/bin/bash
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

#
# devstack/plugin.sh: the devstack plugin of cyborg. Enable it in local.conf
# with this service's repository (not upstream's, which would install the
# upstream service):
#
#     [[local|localrc]]
#     CYBORG_REPO=https://git.example.com/cloud/cyborg.git
#     enable_plugin cyborg $CYBORG_REPO main
#
# The plugin contract: https://docs.openstack.org/devstack/latest/plugins.html

source "$(dirname "${BASH_SOURCE[0]}")/lib/cyborg"

if is_service_enabled cyborg; then
    case "$1" in
        stack)
            case "$2" in
                pre-install)
                    check_cyborg_service_deps
                    ;;
                install)
                    echo_summary "Installing cyborg"
                    install_cyborg
                    if is_service_enabled cyborg-api; then
                        install_cyborgclient
                    fi
                    ;;
                post-config)
                    echo_summary "Configuring cyborg"
                    configure_cyborg
                    if is_service_enabled cyborg-api; then
                        create_cyborg_accounts
                    fi
                    if is_service_enabled nova; then
                        configure_nova_for_cyborg
                    fi
                    ;;
                extra)
                    echo_summary "Initializing and starting cyborg"
                    if is_service_enabled cyborg-cond; then
                        init_cyborg
                    fi
                    start_cyborg
                    ;;
                test-config)
                    if is_service_enabled tempest && is_service_enabled cyborg-api; then
                        echo_summary "Configuring tempest for cyborg"
                        configure_tempest_for_cyborg
                    fi
                    ;;
            esac
            ;;
        unstack)
            stop_cyborg
            ;;
        clean)
            cleanup_cyborg
            ;;
    esac
fi
