#!/bin/bash
# Devstack plugin for cyborg. Enable it in local.conf with:
#     enable_plugin cyborg <repository URL>

source $DEST/cyborg/devstack/lib/cyborg
CYBORG_BIN_DIR=$(get_python_exec_prefix)

if is_service_enabled cyborg; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing cyborg"
        install_cyborg
    elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Configuring cyborg"
        configure_cyborg
        create_cyborg_accounts
    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        echo_summary "Initializing and starting cyborg"
        init_cyborg
        start_cyborg
    elif [[ "$1" == "stack" && "$2" == "test-config" ]]; then
        if is_service_enabled tempest; then
            iniset $TEMPEST_CONFIG service_available cyborg True
        fi
    fi
    if [[ "$1" == "unstack" ]]; then
        stop_cyborg
    fi
    if [[ "$1" == "clean" ]]; then
        cleanup_cyborg
    fi
fi
