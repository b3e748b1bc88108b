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

"""The documentation, the release notes and the API reference build with
warnings as errors, as ``tox -e docs``, ``releasenotes`` and
``api-ref`` build them.

The three builds run at once, each in a process of its own, into a
temporary directory.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SOURCES = {
    'doc': 'doc/source',
    'releasenotes': 'releasenotes/source',
    'api-ref': 'api-ref/source',
}
# Text each build must have produced: proof that the generating
# extensions ran, page -> text.
EXPECTED = {
    'doc': {
        'configuration/config-reference.html': 'bind_timeout',
        'configuration/policy-reference.html': 'cyborg:arq:update',
        '_static/cyborg.conf.sample': '[conductor]',
        '_static/cyborg.policy.yaml.sample': 'cyborg:device:disable',
        # The guides: production install, administration, drivers and
        # the maintenance commands.
        'install/production.html': 'accel:device_profile',
        'admin/index.html': 'Log lines',
        'contributor/drivers.html': 'Writing a driver',
        'maintenance.html': 'online_data_migrations',
    },
    'releasenotes': {
        'unreleased.html': 'accelerator-request-bound',
    },
    'api-ref': {
        'index.html': '/v2/accelerator_requests/{arq_uuid}',
    },
}
TIMEOUT = 300


@pytest.fixture(scope='module')
def builds(tmp_path_factory):
    """Build the three in parallel; name -> (output dir, process)."""
    base = tmp_path_factory.mktemp('docs')
    # Libraries' deprecation warnings (futurist imports eventlet when it
    # is installed) are no documentation warnings; keep them out of the
    # output the test shows.
    env = dict(os.environ, PYTHONWARNINGS='ignore::DeprecationWarning')
    running = {}
    for name, source in SOURCES.items():
        out = str(base / name)
        # -E: read every source again, -n: warn about broken references.
        argv = [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-E',
                '-n', '-q', '-b', 'html', source, out]
        running[name] = (out, subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True))
    results = {}
    for name, (out, process) in running.items():
        stdout, stderr = process.communicate(timeout=TIMEOUT)
        results[name] = (out, process.returncode, stdout + stderr)
    return results


@pytest.mark.parametrize('name', sorted(SOURCES))
def test_builds_without_warnings(builds, name):
    out, returncode, output = builds[name]
    assert returncode == 0, output
    assert 'WARNING' not in output, output
    for page, text in EXPECTED[name].items():
        with open(os.path.join(out, page)) as f:
            assert text in f.read(), '%s not in %s' % (text, page)
