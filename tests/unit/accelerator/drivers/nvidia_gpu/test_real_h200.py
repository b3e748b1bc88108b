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

"""What a real H200 answered to the nvidia-smi queries and the kernel log
read of the driver's health and utilization (read-only, 2026-11-28,
driver 580.159.04, through ``cyborg-manage host capture``), parsed as
the driver parses them."""

from __future__ import annotations

import json
import os

from cyborg.accelerator.drivers.nvidia_gpu import health
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner
from cyborg.hostcapture import recorder
from cyborg.hostcapture import replay

ANSWERS = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..',
                       'fixtures', 'nvidia_smi', 'h200_580.159.04',
                       'driver_commands.json')
H200 = pci.parse_address('0000:00:06.0')


def _runner(tmp_path) -> runner.CommandRunner:
    with open(ANSWERS) as f:
        calls = [recorder.Call.from_json(c) for c in json.load(f)]
    replay.write_tools(calls, str(tmp_path))
    return runner.CommandRunner(search_path=[str(tmp_path)])


def test_an_idle_h200_is_healthy(tmp_path):
    smi = _runner(tmp_path)
    # Its throttle reasons are 0x1 (GPU idle), its retired pages [N/A]
    # (HBM remaps rows instead), and its kernel log holds NVRM lines
    # that are no Xid.
    assert health.smi_problems(smi, 10.0) == {}
    assert health.fatal_xids(smi, 10.0) == {}


def test_an_idle_h200s_utilization(tmp_path):
    assert health.gpu_utilization(_runner(tmp_path), 10.0) == {
        H200: {'gpu_percent': 0.0, 'memory_used_mib': 0,
               'memory_total_mib': 143771}}
