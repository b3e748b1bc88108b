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

"""``cyborg-manage host capture``: what the enabled drivers read on this
host, packed in an archive that replays it.

The enabled drivers are built with a
:class:`~.recorder.RecordingHostRoot` and a
:class:`~.recorder.RecordingRunner` and run as the agent runs them
(discovery, health, utilization), twice, so that what only a second
round reads is captured too. The archive then holds, at the paths the
host has them:

* every file they read, with its content; every directory they
  listed, with the names of its entries (an entry they did not read is
  an empty file, an empty directory or the link it is); every symbolic
  link they followed, as the same relative link; device nodes as empty
  files. Nothing is written on the host but the archive.
* ``cyborg-capture/commands.json``: each command line they ran with
  its answer (status and output, not installed, or timed out). Kernel
  log commands (``dmesg``) keep only the lines that name a PCI device
  or come from NVIDIA's driver.
* ``cyborg-capture/manifest.json``: the format, the time, the kernel
  release, the drivers (and those that failed), the digest of their
  report and its number of devices, the version of each
  command run, the files that could not be read, and the SHA-256 of
  every file.

With ``mask`` serial numbers and MAC addresses are replaced
(:mod:`.mask`). The archive is deterministic: entries sorted, times,
owners and modes fixed, gzip without name or time, so two captures of
an unchanged host differ only in the manifest's ``captured_at``.
"""

from __future__ import annotations

import dataclasses
import datetime
import gzip
import hashlib
import io
import json
import os
import re
import tarfile

from oslo_config import cfg

from cyborg.accelerator.drivers.utils import errors as host_errors
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.agent import discovery
from cyborg.domain import device_tree
from cyborg.hostcapture import mask as mask_mod
from cyborg.hostcapture import recorder

FORMAT = 1
CAPTURE_DIR = 'cyborg-capture'
MANIFEST = CAPTURE_DIR + '/manifest.json'
COMMANDS = CAPTURE_DIR + '/commands.json'
TIME_FORMAT = '%Y-%m-%dT%H:%M:%SZ'
# Discoveries run: what the drivers read only once a first one ran
# (a second round of their state) is captured too.
ROUNDS = 2
# Commands that print the kernel log, and the lines of it kept: those
# naming a PCI device (AER, Xid ``PCI:0000:3b:00``) or NVIDIA's driver.
KERNEL_LOG_COMMANDS = frozenset(['dmesg'])
_DEVICE_LINE = re.compile(r'NVRM|[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:'
                          r'[0-9a-fA-F]{2}')
# How each vendor command tells its version (the first line printed).
VERSION_ARGS = {
    'nvidia-smi': ('--version',), 'npu-smi': ('-v',),
    'fpgainfo': ('--version',), 'xbutil': ('--version',),
    'dmesg': ('--version',), 'lspci': ('--version',), 'ip': ('-V',),
}
VERSION_TIMEOUT = 10.0


@dataclasses.dataclass(frozen=True)
class Entry:
    """One member of the archive: ``kind`` is file, dir or link."""

    kind: str
    data: bytes = b''
    target: str = ''


@dataclasses.dataclass
class Recording:
    """What the drivers read and ran."""

    host: recorder.RecordingHostRoot
    runner: recorder.RecordingRunner
    drivers: list[str]
    failed: list[str]
    # The digest of the last round's report (its tree and failed
    # drivers), as the agent computes it: a replay reports the same.
    digest: str
    devices: int


def record(conf: cfg.ConfigOpts, host_root: str,
           runner: runner_mod.Runner) -> Recording:
    """Run the enabled drivers on ``host_root`` as the agent does,
    recording. Raises ConfigInvalid when they cannot be loaded; a driver
    that fails to discover is recorded all the same (its failure is what
    the capture is for)."""
    host = recorder.RecordingHostRoot(host_root)
    recording_runner = recorder.RecordingRunner(runner)
    drivers = discovery.load_drivers(conf, runner=recording_runner,
                                     host=host)
    finder = discovery.Discovery(conf.host, conf.host, drivers, None)
    failed: set[str] = set()
    for _round in range(ROUNDS):
        wire, round_failed, _utilization = finder.collect_all()
        failed.update(round_failed)
    return Recording(host, recording_runner,
                     [driver.name for driver in drivers], sorted(failed),
                     report_digest(wire, round_failed), len(wire))


def report_digest(wire: list[dict], failed: list[str]) -> str:
    """The digest of a report, as the agent sends it."""
    return device_tree.tree_digest({'devices': wire, 'failed': failed})


def _relative(host: sysfs.HostRoot, real: str) -> str:
    return host.host_path(real).lstrip('/')


def tree_entries(host: recorder.RecordingHostRoot
                 ) -> tuple[dict[str, Entry], list[str]]:
    """The archive members of what ``host`` recorded, and the files that
    could not be read (left out)."""
    entries: dict[str, Entry] = {}
    unreadable: list[str] = []
    for real in sorted(host.links):
        entries[_relative(host, real)] = Entry('link',
                                               target=os.readlink(real))
    for real in sorted(host.paths):
        rel = _relative(host, real)
        if not rel:
            continue
        if os.path.islink(real):
            entries[rel] = Entry('link', target=os.readlink(real))
        elif os.path.isdir(real):
            entries.setdefault(rel, Entry('dir'))
            if real not in host.listed:
                continue
            for name in sorted(os.listdir(real)):
                entries.setdefault(rel + '/' + name,
                                   _placeholder(os.path.join(real, name)))
        elif os.path.isfile(real):
            try:
                with open(real, 'rb') as f:
                    entries[rel] = Entry('file', f.read())
            except OSError:
                unreadable.append(rel)
        elif os.path.exists(real):
            entries[rel] = Entry('file')  # a device node, never read
    return entries, unreadable


def _placeholder(path: str) -> Entry:
    """An entry seen in a listing but not read: its kind only."""
    if os.path.islink(path):
        return Entry('link', target=os.readlink(path))
    if os.path.isdir(path):
        return Entry('dir')
    return Entry('file')


def command_entries(calls: dict[tuple[str, ...], recorder.Call]
                    ) -> list[recorder.Call]:
    """The recorded calls in command line order, kernel logs cut to the
    lines drivers parse."""
    found = []
    for key in sorted(calls):
        call = calls[key]
        if key[0] in KERNEL_LOG_COMMANDS:
            call = dataclasses.replace(call, stdout=''.join(
                line for line in call.stdout.splitlines(keepends=True)
                if _DEVICE_LINE.search(line)))
        found.append(call)
    return found


def tool_versions(runner: runner_mod.Runner,
                  calls: list[recorder.Call]) -> dict[str, str | None]:
    """The version of each command the drivers ran and found (None when
    it does not tell)."""
    versions: dict[str, str | None] = {}
    for name in sorted({c.argv[0] for c in calls if not c.missing}):
        versions[name] = None
        if name not in VERSION_ARGS:
            continue
        try:
            result = runner.run([name, *VERSION_ARGS[name]],
                                timeout=VERSION_TIMEOUT)
        except host_errors.ToolError:
            continue
        lines = [line.strip() for line in result.stdout.splitlines()
                 if line.strip()]
        if result.ok and lines:
            versions[name] = lines[0]
    return versions


def _mask_entries(entries: dict[str, Entry], calls: list[recorder.Call]
                  ) -> tuple[dict[str, Entry], list[recorder.Call]]:
    masker = mask_mod.Masker()
    masked = {path: (dataclasses.replace(entry, data=masker.file(
        path.rsplit('/', 1)[-1], entry.data)) if entry.kind == 'file'
        else entry) for path, entry in sorted(entries.items())}
    return masked, [dataclasses.replace(
        call, stdout=masker.text(call.stdout),
        stderr=masker.text(call.stderr)) for call in calls]


def build(recording: Recording, host_root: str,
          runner: runner_mod.Runner, now: datetime.datetime,
          mask: bool = False) -> dict[str, Entry]:
    """Every member of the archive, the manifest included."""
    entries, unreadable = tree_entries(recording.host)
    calls = command_entries(recording.runner.calls)
    if mask:
        entries, calls = _mask_entries(entries, calls)
    entries[COMMANDS] = Entry('file', _json([c.to_json() for c in calls]))
    manifest = {
        'format': FORMAT,
        'captured_at': now.strftime(TIME_FORMAT),
        'commands': len(calls),
        'kernel': sysfs.read_text(sysfs.HostRoot(host_root),
                                  '/proc/sys/kernel/osrelease'),
        'drivers': recording.drivers,
        'failed_drivers': recording.failed,
        'report': {'digest': recording.digest,
                   'devices': recording.devices},
        'masked': mask,
        'tools': tool_versions(runner, calls),
        'unreadable': unreadable,
        'files': {path: hashlib.sha256(entry.data).hexdigest()
                  for path, entry in sorted(entries.items())
                  if entry.kind == 'file'},
    }
    entries[MANIFEST] = Entry('file', _json(manifest))
    return entries


def _json(value) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True) + '\n').encode()


def write_archive(entries: dict[str, Entry], output: str) -> int:
    """Write ``entries`` as a deterministic ``.tar.gz`` at ``output``
    (through a temporary file next to it); its size."""
    members = dict(entries)
    for path in list(entries):
        parts = path.split('/')
        for depth in range(1, len(parts)):
            members.setdefault('/'.join(parts[:depth]), Entry('dir'))
    partial = output + '.partial'
    with open(partial, 'wb') as raw:
        with gzip.GzipFile(filename='', mode='wb', fileobj=raw,
                           mtime=0) as packed:
            with tarfile.open(fileobj=packed, mode='w',
                              format=tarfile.GNU_FORMAT) as tar:
                for path in sorted(members):
                    _add(tar, path, members[path])
    os.replace(partial, output)
    return os.path.getsize(output)


def _add(tar: tarfile.TarFile, path: str, entry: Entry) -> None:
    info = tarfile.TarInfo(path)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ''
    if entry.kind == 'dir':
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    elif entry.kind == 'link':
        info.type, info.mode = tarfile.SYMTYPE, 0o777
        info.linkname = entry.target
        tar.addfile(info)
    else:
        info.mode = 0o644
        info.size = len(entry.data)
        tar.addfile(info, io.BytesIO(entry.data))


def capture(conf: cfg.ConfigOpts, output: str, host_root: str,
            runner: runner_mod.Runner, mask: bool = False,
            now: datetime.datetime | None = None) -> dict:
    """Capture ``host_root`` as the drivers of ``conf`` read it into the
    archive ``output``; the manifest."""
    recording = record(conf, host_root, runner)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    entries = build(recording, host_root, runner, now, mask=mask)
    write_archive(entries, output)
    return json.loads(entries[MANIFEST].data)
