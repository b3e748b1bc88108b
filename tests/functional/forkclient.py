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

"""Start a console script through a fork server, for a shell.

    python -I -S forkclient.py SOCKET SCRIPT [ARG...]

asks the fork server listening on SOCKET (see :mod:`forkserver`) to
start SCRIPT with the arguments, this process's standard streams,
environment and directory, passes on the signals a shell sends, and
exits with its status (128 + N for a child killed by signal N, as a
shell reports it). A script the server would not start is executed as
it is. Started without ``site`` (``-S``), it costs a few milliseconds
of CPU where a fresh ``openstack`` costs seconds: the shims of
:func:`forkserver.shim_directory` run it, so that the shell commands
of a test (the README's) start the CLI the way the fixtures do.
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

from tests.functional import forkserver

#: Signals passed on to the started process.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(argv: list[str]) -> int:
    socket_path, *command = argv
    request = forkserver.request_for(command)
    if request is None:
        os.execv(command[0], command)
    process = forkserver.start_at(socket_path, request, os.environ,
                                  os.getcwd(), (0, 1, 2), command)
    for number in FORWARDED:
        signal.signal(number, lambda sig, _frame: process.send_signal(sig))
    returncode = process.wait()
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
