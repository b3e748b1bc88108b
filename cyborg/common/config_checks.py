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

"""The checks every cyborg command runs on its configuration before it
starts anything.

Each check returns the problems it finds as lines an operator can act
on (what is wrong, where, and what to change); the commands print one
line per problem and exit with status 2 (see
:func:`cyborg.common.config.prepare_service`). oslo.config converts an
option's value only when it is read, so without :func:`option_problems`
a bad value would surface as a traceback whenever the code first reads
the option, possibly after other services were started.
"""

import ipaddress
import os
import re

from oslo_config import cfg

from cyborg.db import urls

# The exit status of a command refused for its configuration (as for a
# bad command line).
EXIT_STATUS = 2

# What an operator is told to do about a database a command cannot open
# (STATE_DIR_HINT: a command that has --state-dir).
DATABASE_HINT = 'set [database] connection in --config-file'
STATE_DIR_HINT = ('set [database] connection in --config-file, or '
                  '--state-dir to the state directory of a '
                  'cyborg-all-in-one')


# The file oslo.config names in the message of a value it cannot convert.
_SOURCE = re.compile(r"detail='([^']+)'")


class ConfigProblems(Exception):
    """The configuration cannot work; ``problems`` are its lines."""

    def __init__(self, problems: list[str]):
        super().__init__('; '.join(problems))
        self.problems = problems


def _reason(error: Exception) -> str:
    """What is wrong and, when a file set it, where: from oslo.config's
    message (it names the location in its own words)."""
    text = str(error)
    marker = ' is not valid: '
    if marker not in text:
        return text
    where, reason = text.split(marker, 1)
    source = _SOURCE.search(where)
    return '%s (in %s)' % (reason, source.group(1)) if source else reason


def option_problems(conf: cfg.ConfigOpts) -> list[str]:
    """A line for each registered option whose value is not valid (an
    integer option set to ``notanint``, a value out of range or not
    among the choices), naming the option and the file that sets it."""
    problems = []

    def read(mapping, name, group):
        try:
            return mapping[name]
        except (ValueError, cfg.Error) as e:
            problems.append('[%s] %s is not valid: %s' % (
                group or 'DEFAULT', name, _reason(e)))
            return None

    groups = []
    for key in sorted(conf):  # [DEFAULT]'s options first, then groups
        value = read(conf, key, None)
        if isinstance(value, cfg.ConfigOpts.GroupAttr):
            groups.append((key, value))
    for key, group in groups:
        for name in sorted(group):
            read(group, name, key)
    return problems


def database_problems(conf: cfg.ConfigOpts, must_exist: bool,
                      hint: str = DATABASE_HINT) -> list[str]:
    """The database of ``[database] connection`` cannot be opened: a
    URL that is not one, or a SQLite file in a missing directory (or
    missing itself, when ``must_exist``: a command that reads an existing
    database). Servers are not connected to here: the services retry a
    database that is down at start."""
    connection = conf.database.connection
    if not connection:
        return ['[database] connection is not set: %s' % hint]
    try:
        path = urls.sqlite_path(connection)
    except urls.NotADatabaseURL:
        return ['[database] connection is not a database URL: %s' % hint]
    if path is None:
        return []
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        return ['cannot open the database %s: directory %s does not exist; '
                '%s' % (path, directory, hint)]
    if must_exist and not os.path.isfile(path):
        return ['cannot open the database %s: no such file (create it with '
                '"cyborg-dbsync upgrade", or %s)' % (path, hint)]
    if not os.access(path if os.path.exists(path) else directory,
                     os.R_OK | os.W_OK):
        return ['cannot open the database %s: permission denied'
                % path]
    return []


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` keeps a server to this machine."""
    if host == 'localhost':
        return True
    try:
        return ipaddress.ip_address(host.strip('[]')).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any address
