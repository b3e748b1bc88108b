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

"""Run a cyborg console script with a clock the test sets (tests only).

::

    python clocked.py CLOCK_FILE cyborg.cmd.conductor --config-file ...

Every ``oslo_utils.timeutils.utcnow()`` of the process (what cyborg
stamps rows, leases and audit periods with) answers the naive UTC time
written in ISO 8601 in ``CLOCK_FILE`` (see :func:`set_clock`); the time
stands still until the file changes. Timers (periodic tasks,
oslo.messaging's heartbeats) keep the real monotonic clock. The product
has no such hook: the clock is replaced here, before the service's
modules are imported.
"""

import datetime
import importlib
import os
import sys

from oslo_utils import timeutils


def set_clock(path: str, moment: datetime.datetime) -> None:
    """Make the processes reading ``path`` see ``moment`` (atomically:
    a reader never sees half a time)."""
    temporary = path + '.new'
    with open(temporary, 'w') as f:
        f.write(moment.isoformat())
    os.replace(temporary, path)


def file_clock(path: str):
    """A ``timeutils.utcnow`` reading ``path`` (again when it changed)."""
    cache: dict = {}

    def utcnow(with_timezone: bool = False) -> datetime.datetime:
        stat = os.stat(path)
        key = (stat.st_ino, stat.st_mtime_ns)
        if cache.get('key') != key:
            with open(path) as f:
                cache['now'] = datetime.datetime.fromisoformat(f.read())
            cache['key'] = key
        now = cache['now']
        return (now.replace(tzinfo=datetime.timezone.utc) if with_timezone
                else now)

    utcnow.override_time = None
    return utcnow


def main() -> None:
    path, module = sys.argv[1], sys.argv[2]
    timeutils.utcnow = file_clock(path)
    sys.argv = [module] + sys.argv[3:]
    sys.exit(importlib.import_module(module).main())


if __name__ == '__main__':
    main()
