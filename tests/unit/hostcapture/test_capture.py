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

"""Capture and replay of the fixture hosts built by
cyborg.allinone.host_tree: the replay reports the tree the host
reported, a capture is deterministic and holds only what the drivers
read, masking, and the committed captures are those of today's
drivers."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile

import pytest

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import runner
from cyborg.accelerator.drivers.utils import sysfs
from cyborg.agent import discovery
from cyborg.allinone import fake_tools
from cyborg.hostcapture import capture
from cyborg.hostcapture import mask
from cyborg.hostcapture import recorder
from cyborg.hostcapture import replay
from tests.fixtures import captures
from tests.fixtures.hosts import hosts

REGENERATE = 'run "python -m tests.fixtures.captures" and commit the result'


def report(conf, run, host):
    """(digest, utilization, failed drivers) of one discovery."""
    drivers = discovery.load_drivers(conf, runner=run, host=host)
    wire, failed, utilization = discovery.Discovery(
        'host', 'host', drivers, None).collect_all()
    return capture.report_digest(wire, failed), utilization, failed


def members(archive: str) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive) as tar:
        return {m.name: m for m in tar.getmembers()}


def read_member(archive: str, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        return tar.extractfile(name).read()


def commands(archive: str) -> dict[tuple[str, ...], dict]:
    return {tuple(c['argv']): c for c in json.loads(
        read_member(archive, capture.COMMANDS))}


@pytest.mark.parametrize('host', captures.HOSTS, ids=lambda h: h.name)
def test_the_replay_of_a_capture_reports_what_the_host_reported(
        host, tmp_path):
    output = str(tmp_path / 'capture.tar.gz')
    tree, manifest = captures.build_and_capture(host, str(tmp_path), output)
    conf = captures.configure(host, tree.root, str(tmp_path))
    original = report(conf, runner.CommandRunner([tree.tools_dir]),
                      sysfs.HostRoot(tree.root))
    assert original[2] == []
    assert manifest['report']['digest'] == original[0]
    assert manifest['report']['devices'] > 0

    replayed = replay.open_capture(output, str(tmp_path / 'replay'))
    assert report(conf, replayed.runner(), replayed.host()) == original
    # The committed capture of the host is this one.
    with open(host.archive, 'rb') as committed, open(output, 'rb') as new:
        assert committed.read() == new.read(), (
            '%s is out of date: %s' % (host.archive, REGENERATE))


def test_an_unpacked_capture_replays_as_its_archive(tmp_path):
    host = captures.BY_NAME['demo']
    unpacked = tmp_path / 'unpacked'
    with tarfile.open(host.archive) as tar:
        tar.extractall(unpacked, filter='data')
    conf = captures.configure(host, str(unpacked), str(tmp_path))
    results = []
    for source, work in ((str(unpacked), 'a'), (host.archive, 'b')):
        opened = replay.open_capture(source, str(tmp_path / work))
        results.append(report(conf, opened.runner(), opened.host()))
    assert results[0] == results[1]
    manifest = json.loads(read_member(host.archive, capture.MANIFEST))
    assert results[0][0] == manifest['report']['digest']


def _tar_without_time(archive: str, manifest: dict) -> bytes:
    with open(archive, 'rb') as f:
        data = gzip.decompress(f.read())
    return data.replace(manifest['captured_at'].encode(), b'<time>')


def test_a_capture_taken_twice_differs_only_in_the_manifest_time(
        tmp_path):
    host = captures.BY_NAME['demo']
    tree = host.build(str(tmp_path / 'host'))
    conf = captures.configure(host, tree.root, str(tmp_path))
    taken = []
    for name in ('first', 'second'):
        output = str(tmp_path / (name + '.tar.gz'))
        manifest = capture.capture(
            conf, output, tree.root,
            runner.CommandRunner([tree.tools_dir]))
        taken.append(_tar_without_time(output, manifest))
    assert taken[0] == taken[1]
    first = tarfile.open(fileobj=io.BytesIO(taken[0]))
    assert {m.mtime for m in first.getmembers()} == {0}
    assert {(m.uid, m.gid) for m in first.getmembers()} == {(0, 0)}


def test_the_manifest_hashes_every_file_and_names_the_drivers(tmp_path):
    archive = captures.BY_NAME['nvidia_gpu'].archive
    manifest = json.loads(read_member(archive, capture.MANIFEST))
    files = {name for name, info in members(archive).items()
             if info.isfile()} - {capture.MANIFEST}
    assert set(manifest['files']) == files
    assert manifest['drivers'] == ['nvidia_gpu_driver']
    assert manifest['format'] == capture.FORMAT
    assert manifest['captured_at'] == '2026-01-01T00:00:00Z'
    # The fake nvidia-smi tells no version; the kernel release is read
    # under the host root, where the fixture has none.
    assert manifest['tools'] == {'nvidia-smi': None}
    assert manifest['kernel'] is None


def test_a_capture_holds_only_what_the_drivers_read(tmp_path):
    names = members(captures.BY_NAME['nvidia_gpu'].archive)
    # The fake commands, the nvidia driver's unbind lock (read only when
    # a GPU is rebound) and the files of a GPU's directory that nothing
    # listed or read are not captured.
    assert not [n for n in names if n.startswith('usr/')]
    assert not [n for n in names if n.endswith('unbindLock')]
    pgpu = ('sys/devices/pci0000:3a/0000:3a:00.0/%s/' % hosts.PGPU)
    assert pgpu + 'vendor' in names
    assert pgpu + 'modalias' not in names
    # Links are kept as the host's relative links.
    link = names['sys/bus/pci/devices/' + hosts.PGPU]
    assert link.issym()
    assert link.linkname == '../../../devices/pci0000:3a/0000:3a:00.0/' + (
        hosts.PGPU)
    assert os.path.getsize(captures.BY_NAME['demo'].archive) < 64 * 1024


def test_the_kernel_log_keeps_the_lines_drivers_parse(tmp_path):
    host = captures.BY_NAME['nvidia_gpu']
    tree = host.build(str(tmp_path / 'host'))
    xid = fake_tools.xid_line(hosts.PGPU, 79)
    fake_tools.write_dmesg(tree.tools_dir, [
        '[    1.000000] Linux version 6.8.0 (buildd@host) #1 SMP',
        '[    2.000000] systemd[1]: Started Session 3 of user alice.', xid])
    conf = captures.configure(host, tree.root, str(tmp_path))
    output = str(tmp_path / 'capture.tar.gz')
    capture.capture(conf, output, tree.root,
                    runner.CommandRunner([tree.tools_dir]))
    assert commands(output)[('dmesg',)]['stdout'] == xid + '\n'
    original = report(conf, runner.CommandRunner([tree.tools_dir]),
                      sysfs.HostRoot(tree.root))
    opened = replay.open_capture(output, str(tmp_path / 'replay'))
    assert report(conf, opened.runner(), opened.host()) == original
    # The Xid made the GPU unhealthy, in the replay too.
    assert original[0] != json.loads(read_member(
        host.archive, capture.MANIFEST))['report']['digest']


def test_a_missing_command_stays_missing_in_the_replay(tmp_path):
    archive = captures.BY_NAME['nvidia_gpu'].archive
    # The fixture host has no dmesg: recorded as such, and the replay
    # has none either (no real dmesg is found instead).
    assert commands(archive)[('dmesg',)] == {
        'argv': ['dmesg'], 'missing': True}
    opened = replay.open_capture(archive, str(tmp_path))
    assert _tools(opened.tools_dir) == ['nvidia-smi']
    with pytest.raises(Exception) as raised:
        opened.runner().run(['dmesg'])
    assert 'not found' in str(raised.value)


def test_a_command_line_the_capture_lacks_fails_like_an_unknown_one(
        tmp_path):
    opened = replay.open_capture(captures.BY_NAME['qat_4xxx'].archive,
                                 str(tmp_path))
    result = opened.runner().run(['adf_ctl', 'restart'])
    assert result.returncode == 2
    assert 'unknown arguments: restart' in result.stderr
    assert 'state: up' in opened.runner().run(['adf_ctl', 'status']).stdout


def test_masking_replaces_serial_numbers_and_mac_addresses(tmp_path):
    host = captures.BY_NAME['ascend_pair']
    plain = captures.BY_NAME['ascend_pair'].archive
    masked = str(tmp_path / 'masked.tar.gz')
    tree, manifest = captures.build_and_capture(
        host, str(tmp_path), masked, mask=True)
    assert manifest['masked'] is True
    assert b'033VNY10MB000070' in read_member(plain, capture.COMMANDS)
    text = read_member(masked, capture.COMMANDS)
    assert b'033VNY10MB00007' not in text
    assert b'MASKED0001' in text and b'MASKED0002' in text
    conf = captures.configure(host, tree.root, str(tmp_path))
    opened = replay.open_capture(masked, str(tmp_path / 'replay'))
    # The driver reports no serial number: the same tree.
    assert report(conf, opened.runner(), opened.host())[0] == (
        manifest['report']['digest'])


def test_the_masker_keeps_one_stand_in_per_value():
    masker = mask.Masker()
    text = masker.text('link/ether 3c:fd:fe:a1:b2:c0 brd ff:ff:ff:ff:ff:ff'
                       ' vf 0 MAC 3C:FD:FE:A1:B2:C0 at 0000:3b:00.0\n'
                       '\tSerial Number : ABC123\n')
    assert text == ('link/ether 02:00:00:00:00:01 brd 02:00:00:00:00:02'
                    ' vf 0 MAC 02:00:00:00:00:01 at 0000:3b:00.0\n'
                    '\tSerial Number : MASKED0001\n')
    assert masker.file('serial', b'ABC123    \n') == b'MASKED0001    \n'
    assert masker.file('address', b'fa:16:3e:11:22:33\n') == (
        b'02:00:00:00:00:03\n')
    assert masker.file('config', b'\xff\xfe') == b'\xff\xfe'


def test_the_masker_replaces_gpu_and_mig_uuids():
    masker = mask.Masker()
    # As the nvidia driver's information file and nvidia-smi -L print
    # them (an H200's, read on a real host).
    text = masker.text(
        'GPU UUID: \t GPU-e1e39552-3a43-3fe2-555c-d29ba930ab57\n'
        'GPU 0: NVIDIA H200 (UUID: GPU-E1E39552-3A43-3FE2-555C-D29BA930AB57)'
        '\n  MIG 1g.18gb Device 0: (UUID: '
        'MIG-0a1b2c3d-0000-5555-aaaa-0123456789ab)\n')
    assert text == (
        'GPU UUID: \t GPU-00000000-0000-4000-8000-000000000001\n'
        'GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-4000-8000-000000000001)'
        '\n  MIG 1g.18gb Device 0: (UUID: '
        'MIG-00000000-0000-4000-8000-000000000002)\n')


def test_a_tampered_capture_is_refused(tmp_path):
    unpacked = tmp_path / 'unpacked'
    with tarfile.open(captures.BY_NAME['qat_4xxx'].archive) as tar:
        tar.extractall(unpacked, filter='data')
    with open(unpacked / capture.COMMANDS, 'a') as f:
        f.write(' ')
    with pytest.raises(replay.CaptureError) as raised:
        replay.open_capture(str(unpacked), str(tmp_path / 'replay'))
    assert str(raised.value) == (
        "%s: %s does not match the manifest's hash" % (unpacked,
                                                       capture.COMMANDS))


def test_an_archive_with_a_member_outside_its_root_is_refused(tmp_path):
    archive = str(tmp_path / 'evil.tar.gz')
    with tarfile.open(archive, 'w:gz') as tar:
        info = tarfile.TarInfo('../outside')
        info.size = 1
        tar.addfile(info, io.BytesIO(b'x'))
    with pytest.raises(replay.CaptureError) as raised:
        replay.open_capture(archive, str(tmp_path / 'replay'))
    assert 'is not a readable capture archive' in str(raised.value)
    assert not (tmp_path / 'outside').exists()


def test_a_directory_without_a_manifest_is_a_host_not_a_capture(tmp_path):
    tree = hosts.qat_4xxx_host(str(tmp_path / 'host'))
    assert not replay.is_capture(tree.root)
    assert replay.is_capture(captures.BY_NAME['qat_4xxx'].archive)
    not_archive = tmp_path / 'notes.txt'
    not_archive.write_text('hello')
    assert not replay.is_capture(str(not_archive))


def test_the_agent_replays_a_capture_named_as_its_host_root(tmp_path):
    host = captures.BY_NAME['qat_4xxx']
    conf = captures.configure(host, host.archive, str(tmp_path))
    host_root, run = replay.host_and_runner(conf)
    assert host_root.root == str(tmp_path / 'state' / replay.STATE_DIR /
                                 'root')
    manifest = json.loads(read_member(host.archive, capture.MANIFEST))
    assert report(conf, run, host_root)[0] == manifest['report']['digest']
    plain = captures.configure(host, str(tmp_path), str(tmp_path))
    assert replay.host_and_runner(plain) == (None, None)


def test_a_command_that_timed_out_times_out_in_the_replay(tmp_path):
    tools_dir = str(tmp_path / 'tools')
    fake_tools.write_tool(tools_dir, 'npu-smi', {('info', '-l'): (
        fake_tools.Reply('partial\n', sleep=5))})
    recording = recorder.RecordingRunner(runner.CommandRunner([tools_dir]))
    with pytest.raises(errors.ToolTimeout):
        recording.run(['npu-smi', 'info', '-l'], timeout=0.3)
    with pytest.raises(errors.ToolNotAvailable):
        recording.run(['xbutil', 'examine'])
    calls = capture.command_entries(recording.calls)
    assert [c.to_json() for c in calls] == [
        {'argv': ['npu-smi', 'info', '-l'], 'timeout': 0.3,
         'stdout': 'partial\n', 'stderr': ''},
        {'argv': ['xbutil', 'examine'], 'missing': True}]
    replayed = str(tmp_path / 'replayed')
    replay.write_tools(calls, replayed)
    assert _tools(replayed) == ['npu-smi']
    with pytest.raises(errors.ToolTimeout) as raised:
        runner.CommandRunner([replayed]).run(['npu-smi', 'info', '-l'],
                                             timeout=0.3)
    assert raised.value.stdout == 'partial\n'


def test_a_driver_that_fails_is_captured_failing(tmp_path):
    host = captures.BY_NAME['qat_4xxx']
    tree = host.build(str(tmp_path / 'host'))
    tree.write(tree.dev(hosts.QAT_PF, 'vendor'), 'intel')
    conf = captures.configure(host, tree.root, str(tmp_path))
    output = str(tmp_path / 'capture.tar.gz')
    manifest = capture.capture(conf, output, tree.root,
                               runner.CommandRunner([tree.tools_dir]))
    assert manifest['failed_drivers'] == ['intel_qat_driver']
    assert manifest['report']['devices'] == 0
    # The file that fails it is in the capture: the replay fails alike.
    vendor = 'sys/devices/pci0000:6a/0000:6a:00.0/%s/vendor' % hosts.QAT_PF
    assert read_member(output, vendor) == b'intel\n'
    opened = replay.open_capture(output, str(tmp_path / 'replay'))
    digest, _utilization, failed = report(conf, opened.runner(),
                                          opened.host())
    assert (digest, failed) == (manifest['report']['digest'],
                                ['intel_qat_driver'])


def _tools(tools_dir):
    """The commands of a replay's tools directory (its dotfiles are the
    fake tools' reply tables)."""
    return sorted(n for n in os.listdir(tools_dir) if not n.startswith('.'))
