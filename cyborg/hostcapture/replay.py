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

"""Replay of a capture: a host root and fake vendor commands.

``[agent] host_root`` (and ``--host-root`` of ``cyborg-all-in-one`` and
``cyborg-manage host check``) may name a capture, unpacked or as its
archive, instead of a host. :func:`open_capture` then copies its tree
into a working directory (drivers may write to the tree they read, the
capture itself is never changed), checks every file against the
manifest's hash, and writes one fake command
(:func:`cyborg.allinone.fake_tools.write_tool`) per command the drivers
ran, answering each captured command line as the host did; a command
line the capture does not hold fails with a usage error (exit 2), a
command the host did not have is absent, a command that timed out
sleeps past its timeout. The runner of a replay finds those commands
and no others.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tarfile

from oslo_config import cfg

from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.allinone import fake_tools
from cyborg.common import exception
from cyborg.hostcapture import capture as capture_mod
from cyborg.hostcapture import recorder

# Where the agent replays a capture, under [DEFAULT] state_path.
STATE_DIR = 'host-replay'
# Seconds a timed-out command sleeps beyond the timeout it had.
TIMEOUT_MARGIN = 1.0


class CaptureError(exception.ConfigInvalid):
    """A capture that cannot be replayed (one line saying why): a host
    root that cannot work."""



@dataclasses.dataclass(frozen=True)
class Replay:
    """A capture made ready: its tree, its commands, its manifest."""

    root: str
    tools_dir: str
    manifest: dict

    def host(self) -> sysfs.HostRoot:
        return sysfs.HostRoot(self.root)

    def runner(self) -> runner_mod.CommandRunner:
        """A runner that finds the capture's commands and no others."""
        return runner_mod.CommandRunner(search_path=[self.tools_dir])


def is_capture(path: str) -> bool:
    """Whether ``path`` is a capture: an archive, or a directory with
    the capture's manifest."""
    if os.path.isdir(path):
        return os.path.isfile(os.path.join(path, capture_mod.MANIFEST))
    return os.path.isfile(path) and tarfile.is_tarfile(path)


def open_capture(source: str, work_dir: str) -> Replay:
    """Make the capture at ``source`` ready to replay under
    ``work_dir`` (emptied first); raises :class:`CaptureError`."""
    root = os.path.join(work_dir, 'root')
    tools_dir = os.path.join(work_dir, 'tools')
    for path in (root, tools_dir):
        if os.path.lexists(path):
            shutil.rmtree(path)
    os.makedirs(tools_dir)
    if os.path.isdir(source):
        shutil.copytree(source, root, symlinks=True)
    else:
        _unpack(source, root)
    manifest = _manifest(source, root)
    write_tools(_commands(source, root), tools_dir)
    return Replay(root, tools_dir, manifest)


def _unpack(archive: str, root: str) -> None:
    try:
        with tarfile.open(archive, 'r:*') as tar:
            # The data filter refuses members outside the root, links
            # leading out of it and anything but files, directories and
            # links.
            tar.extractall(root, filter='data')
    except (tarfile.TarError, OSError, EOFError) as e:
        raise CaptureError('%s is not a readable capture archive: %s'
                           % (archive, e))


def _load(source: str, root: str, member: str):
    try:
        with open(os.path.join(root, member), 'rb') as f:
            return json.loads(f.read())
    except (OSError, ValueError) as e:
        raise CaptureError('%s: %s cannot be read: %s'
                           % (source, member, e))


def _manifest(source: str, root: str) -> dict:
    manifest = _load(source, root, capture_mod.MANIFEST)
    if not isinstance(manifest, dict) or manifest.get(
            'format') != capture_mod.FORMAT:
        raise CaptureError('%s: not a capture of format %d' % (
            source, capture_mod.FORMAT))
    for member, digest in sorted(manifest.get('files', {}).items()):
        try:
            with open(os.path.join(root, member), 'rb') as f:
                actual = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            actual = None
        if actual != digest:
            raise CaptureError('%s: %s does not match the manifest\'s '
                               'hash' % (source, member))
    return manifest


def _commands(source: str, root: str) -> list[recorder.Call]:
    data = _load(source, root, capture_mod.COMMANDS)
    try:
        return [recorder.Call.from_json(item) for item in data]
    except (TypeError, KeyError) as e:
        raise CaptureError('%s: %s is malformed: %s' % (
            source, capture_mod.COMMANDS, e))


def write_tools(calls: list[recorder.Call], tools_dir: str) -> None:
    """One fake command per command name of ``calls`` that the host had,
    answering each of its command lines as captured."""
    replies: dict[str, dict] = {}
    for call in calls:
        name = call.argv[0]
        if call.missing or os.sep in name:
            continue
        reply = fake_tools.Reply(call.stdout, call.stderr, call.rc)
        if call.timeout is not None:
            reply = fake_tools.Reply(call.stdout, call.stderr, 0,
                                     sleep=call.timeout + TIMEOUT_MARGIN)
        replies.setdefault(name, {})[tuple(call.argv[1:])] = reply
    for name, table in sorted(replies.items()):
        fake_tools.write_tool(tools_dir, name, table)


def host_and_runner(conf: cfg.ConfigOpts
                    ) -> tuple[sysfs.HostRoot | None,
                               runner_mod.Runner | None]:
    """What the agent's drivers read and run through (the arguments of
    :func:`cyborg.agent.service.create`): the replay of ``[agent]
    host_root`` (prepared under ``[DEFAULT] state_path``) when it names
    a capture, else (None, None): their own. Raises
    :class:`CaptureError`."""
    source = conf.agent.host_root
    if not is_capture(source):
        return None, None
    replay = open_capture(source, os.path.join(conf.state_path, STATE_DIR))
    return replay.host(), replay.runner()
