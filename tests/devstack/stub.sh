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

# A stand-in for a system command, installed under the command's name in a
# directory at the head of PATH by harness.sh. It appends one line, the
# command and its arguments, to $STUB_LOG and answers as the devstack
# functions that call the command need. It changes nothing outside
# $HARNESS_ROOT.

name=$(basename "$0")
echo "$name $*" >> "$STUB_LOG"

# True when every absolute path among the arguments lies in $HARNESS_ROOT.
function inside_root {
    local arg
    for arg in "$@"; do
        if [[ "$arg" == /* && "$arg" != "$HARNESS_ROOT"/* ]]; then
            return 1
        fi
    done
    return 0
}

case "$name" in
    sudo)
        # File operations inside the test's root run for real (as the
        # test's user); everything else is only recorded.
        case "$1" in
            install|mkdir|rm|tee|cp|chown|mv)
                if inside_root "${@:2}"; then
                    exec "$@"
                fi
                ;;
        esac
        # What tee would have echoed.
        [[ "$1" == tee ]] && cat
        exit 0
        ;;
    openstack)
        # get_or_create_service and _get_or_create_endpoint_with_interface
        # create what "show" and "list" do not find.
        [[ " $* " == *" service show "* ]] && exit 1
        [[ " $* " == *" list "* ]] && exit 0
        echo stub-id
        ;;
    curl)
        # wait_for_service reads the status code written with -w. With
        # STUB_CURL_STATUS=500 the API answers 500 (no application).
        status=${STUB_CURL_STATUS:-200}
        [[ " $* " == *" -w "* ]] && echo $status
        # curl -f fails on an HTTP error.
        [[ " $* " == *" -f "* && $status -ge 400 ]] && exit 22
        exit 0
        ;;
    a2query)
        # Every apache module is enabled already.
        exit 0
        ;;
esac
exit 0
