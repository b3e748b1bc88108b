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

"""cyborg.accelerator.drivers.utils.runner: vendor commands run through
one runner that only finds the fixtures' fake tools."""

import os
import time

import pytest

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import runner
from cyborg.allinone import fake_tools as tools
from tests.fixtures.hosts import hosts


@pytest.fixture
def gpu(tmp_path):
    tree = hosts.nvidia_gpu_host(str(tmp_path))
    return tree, runner.CommandRunner(search_path=[tree.tools_dir])


def test_finds_only_tools_in_its_search_path(gpu, tmp_path):
    tree, run = gpu
    assert run.which('nvidia-smi') == os.path.join(tree.tools_dir,
                                                   'nvidia-smi')
    assert run.available('nvidia-smi')
    assert not run.available('adf_ctl')
    assert not run.available('../usr/bin/nvidia-smi')
    assert not run.available('')
    other = runner.CommandRunner(search_path=[str(tmp_path / 'empty')])
    assert not other.available('nvidia-smi')


def test_default_search_path_is_path_plus_sbin(monkeypatch):
    monkeypatch.setenv('PATH', '/opt/vendor/bin')
    assert runner.CommandRunner().search_path == [
        '/opt/vendor/bin', '/usr/local/sbin', '/usr/sbin', '/sbin']


def test_query_csv_with_header(gpu):
    tree, run = gpu
    result = run.run(['nvidia-smi', *tools.gpu_query_args(False, False)],
                     timeout=30)
    assert result.ok and result.check() is result
    assert result.argv[0] == os.path.join(tree.tools_dir, 'nvidia-smi')
    lines = result.stdout.splitlines()
    assert lines[0].endswith('power.draw [W], memory.total [MiB]')
    assert lines[1].startswith('0, 00000000:3B:00.0, GPU-')
    rows = runner.parse_csv(result.stdout, header=True)
    assert rows[0]['pci.bus_id'] == '00000000:3B:00.0'
    assert rows[0]['memory.total'] == '15360 MiB'
    assert rows[0]['retired_pages.pending'] is None
    assert rows[1]['power.draw'] is None


def test_query_csv_noheader_nounits(gpu):
    _tree, run = gpu
    result = run.run(['nvidia-smi', *tools.gpu_query_args(True, True)])
    rows = runner.parse_csv(result.stdout, fields=tools.GPU_QUERY_FIELDS)
    assert [r['index'] for r in rows] == ['0', '1']
    assert rows[0]['power.draw'] == '35.12'
    assert rows[1]['temperature.gpu'] == '41'


def test_parse_csv_errors():
    with pytest.raises(ValueError):
        runner.parse_csv('1, 2\n')
    with pytest.raises(ValueError):
        runner.parse_csv('1, 2, 3\n', fields=['a', 'b'])
    assert runner.parse_csv('', header=True) == []
    assert runner.parse_csv('x [W], y\n[Not Supported], N/A\n',
                            header=True) == [{'x': None, 'y': None}]


def test_health_bits_of_q(gpu):
    _tree, run = gpu
    out = run.run(['nvidia-smi', '-q']).stdout
    assert 'Virtualization Mode               : Host VGPU' in out
    assert 'Host VGPU Mode                    : Non SR-IOV' in out


def test_non_zero_status_is_a_result_until_checked(gpu):
    _tree, run = gpu
    result = run.run(['nvidia-smi', '--query-gpu=index,xid',
                      '--format=csv'])
    assert result.returncode == 2 and not result.ok
    assert 'is not a valid field' in result.stdout
    with pytest.raises(errors.ToolFailed) as caught:
        result.check()
    assert caught.value.returncode == 2


def test_unknown_arguments_fail_loudly(gpu):
    _tree, run = gpu
    result = run.run(['nvidia-smi', 'vgpu', '-s'])
    assert result.returncode == 2
    assert 'unknown arguments: vgpu -s' in result.stderr


def test_missing_tool_is_not_available(gpu):
    _tree, run = gpu
    with pytest.raises(errors.ToolNotAvailable) as caught:
        run.run(['fpgainfo', 'fme'])
    assert caught.value.argv == ['fpgainfo', 'fme']
    with pytest.raises(errors.ToolNotAvailable):
        run.run(['/nonexistent/bin/xbmgmt', 'examine'])


def test_tool_that_cannot_be_executed_is_not_available(gpu):
    tree, run = gpu
    path = os.path.join(tree.tools_dir, 'xbmgmt')
    with open(path, 'w') as f:
        f.write('#!/nonexistent/interpreter\n')
    os.chmod(path, 0o755)
    with pytest.raises(errors.ToolNotAvailable):
        run.run(['xbmgmt', 'examine'])


def test_timeout_kills_and_raises(tmp_path):
    tools.write_tool(str(tmp_path), 'npu-smi', {
        ('info',): tools.Reply('partial\n', sleep=30)})
    run = runner.CommandRunner(search_path=[str(tmp_path)])
    with pytest.raises(errors.ToolTimeout) as caught:
        run.run(['npu-smi', 'info'], timeout=3)
    assert caught.value.timeout == 3
    assert caught.value.stdout == 'partial\n'


def test_timeout_kills_the_children_too(tmp_path):
    # A wrapper script whose child keeps the output pipe open.
    path = tmp_path / 'fpgainfo'
    path.write_text('#!/bin/sh\necho started\nsleep 30\necho never\n')
    path.chmod(0o755)
    run = runner.CommandRunner(search_path=[str(tmp_path), '/bin',
                                            '/usr/bin'])
    started = time.monotonic()
    with pytest.raises(errors.ToolTimeout) as caught:
        run.run(['fpgainfo', 'fme'], timeout=2)
    assert time.monotonic() - started < 15
    assert caught.value.stdout == 'started\n'


def test_no_shell_and_c_locale(tmp_path):
    # Arguments reach the tool as they are: no shell expands them.
    tools.write_tool(str(tmp_path), 'adf_ctl', {
        ('status; touch pwned', '$HOME'): tools.Reply('literal\n')})
    run = runner.CommandRunner(search_path=[str(tmp_path)])
    result = run.run(['adf_ctl', 'status; touch pwned', '$HOME'])
    assert result.stdout == 'literal\n'
    assert not os.path.exists('pwned')
    assert tools.calls(str(tmp_path)) == [
        ['adf_ctl', 'status; touch pwned', '$HOME']]
    assert run._environment() == {'PATH': str(tmp_path), 'LC_ALL': 'C',
                                  'LANG': 'C'}


def test_bad_argv(gpu):
    _tree, run = gpu
    for argv in ([], 'nvidia-smi -q'):
        with pytest.raises(ValueError):
            run.run(argv)


def test_adf_ctl_status(tmp_path):
    tree = hosts.qat_4xxx_host(str(tmp_path))
    run = runner.CommandRunner(search_path=[tree.tools_dir])
    out = run.run(['adf_ctl', 'status']).check().stdout
    assert out.splitlines() == [
        'Checking status of all devices.',
        'There is 1 QAT acceleration device(s) in the system:',
        ' qat_dev0 - type: 4xxx,  inst_id: 0,  node_id: 0,  '
        'bsf: 0000:6b:00.0,  #accel: 1 #engines: 9 state: up']


def test_npu_smi_board_info(tmp_path):
    tree = hosts.ascend_host(str(tmp_path))
    run = runner.CommandRunner(search_path=[tree.tools_dir])
    out = run.run(['npu-smi', 'info', '-t', 'board', '-i', '0']).stdout
    assert '\tPCIe Bus Info                  : 0000:61:00.0' in out.split(
        '\n')
