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

"""The ``cyborg-manage host capture`` and ``host check`` commands.

Both read the host under ``--host-root`` (default ``[agent]
host_root``), which may itself be a capture (replayed in a temporary
directory), with the drivers and options of the configuration.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from typing import TextIO

from oslo_config import cfg

from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.common import exception
from cyborg.hostcapture import capture
from cyborg.hostcapture import check
from cyborg.hostcapture import replay

# Above this size a capture is bigger than it should be: the command
# says so (a capture holds what drivers read, a few hundred KB at most).
LARGE_CAPTURE = 512 * 1024


class CommandFailed(Exception):
    """The command could not do its work (one line saying why)."""


@contextlib.contextmanager
def host_to_read(host_root: str):
    """(root, runner) of ``host_root``: the host itself with the
    installed commands, or the replay of a capture."""
    if not os.path.exists(host_root):
        raise CommandFailed('the host root %s does not exist' % host_root)
    if not replay.is_capture(host_root):
        yield host_root, runner_mod.CommandRunner()
        return
    with tempfile.TemporaryDirectory(prefix='cyborg-replay-') as work:
        try:
            opened = replay.open_capture(host_root, work)
        except replay.CaptureError as e:
            raise CommandFailed(str(e))
        yield opened.root, opened.runner()


def capture_command(conf: cfg.ConfigOpts, output: str,
                    host_root: str | None = None, mask: bool = False,
                    out: TextIO = sys.stdout) -> int:
    """Write the capture of the host to ``output``; 0."""
    directory = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(directory):
        raise CommandFailed('cannot write %s: %s is no directory'
                            % (output, directory))
    with host_to_read(host_root or conf.agent.host_root) as (root, runner):
        try:
            manifest = capture.capture(conf, output, root, runner,
                                       mask=mask)
        except exception.ConfigInvalid as e:
            raise CommandFailed(str(e))
        except OSError as e:
            raise CommandFailed('cannot write %s: %s' % (output, e))

    size = os.path.getsize(output)
    print('Captured %d file(s) and %d command(s) of driver(s) %s in %s '
          '(%d bytes)%s.' % (
              len(manifest['files']) - 1, manifest['commands'],
              ', '.join(manifest['drivers']) or 'none', output, size,
              ', serial numbers and MAC addresses masked' if mask else ''),
          file=out)
    if manifest['failed_drivers']:
        print('Driver(s) %s failed on this host; the capture holds what '
              'they read until then.' % ', '.join(
                  manifest['failed_drivers']), file=out)
    if size > LARGE_CAPTURE:
        print('The capture is larger than %d KB: check that it holds '
              'only what you mean to share.' % (LARGE_CAPTURE // 1024),
              file=out)
    return 0


def check_command(conf: cfg.ConfigOpts, host_root: str | None = None,
                  as_json: bool = False, out: TextIO = sys.stdout) -> int:
    """Print the check of the host; 0 when it passes, 1 otherwise."""
    with host_to_read(host_root or conf.agent.host_root) as (root, runner):
        result = check.check(conf, runner=runner, host=sysfs.HostRoot(root))
    if as_json:
        print(json.dumps(result.to_json(), indent=2, sort_keys=True),
              file=out)
    else:
        print('\n'.join(check.render(result)), file=out)
    return 1 if result.problems else 0
