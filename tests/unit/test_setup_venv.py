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

"""tools/setup-venv.sh runs pip only when the dependencies changed (on a
virtualenv whose pip and python are fakes that log their calls)."""

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'tools', 'setup-venv.sh')


@pytest.fixture
def venv(tmp_path):
    bin_dir = tmp_path / 'venv' / 'bin'
    bin_dir.mkdir(parents=True)
    for name in ('pip', 'python'):
        tool = bin_dir / name
        tool.write_text('#!/bin/sh\necho "%s $*" >> "%s"\n'
                        'exit ${FAKE_EXIT:-0}\n' % (name, tmp_path / 'calls'))
        tool.chmod(0o755)
    return tmp_path


def _setup(venv, *args, fail=False):
    env = dict(os.environ, VENV=str(venv / 'venv'))
    if fail:
        env['FAKE_EXIT'] = '1'
    calls = venv / 'calls'
    calls.write_text('')
    result = subprocess.run([SCRIPT, *args], env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    return result, calls.read_text().splitlines()


def test_pip_runs_once_then_only_when_needed(venv):
    result, calls = _setup(venv)
    assert result.returncode == 0, result.stderr
    assert [c.split()[:2] for c in calls] == [
        ['pip', 'install'], ['pip', 'install'], ['python', '-c']]
    assert 'Dependencies changed: updating' in result.stdout
    # The same dependencies: nothing to do.
    result, calls = _setup(venv)
    assert (result.returncode, calls, result.stdout) == (0, [], '')
    # --test needs more than was installed; then a plain run is served.
    result, calls = _setup(venv, '--test')
    assert any('test-requirements.txt' in call for call in calls)
    assert _setup(venv)[1] == []
    assert _setup(venv, '--test')[1] == []
    assert _setup(venv, '--bench')[1] != []


def test_a_changed_dependency_hash_reinstalls(venv):
    _setup(venv)
    stamp = venv / 'venv' / '.cyborg-setup'
    stamp.write_text('0' * 64 + ' run\n')
    result, calls = _setup(venv)
    assert calls and result.returncode == 0
    assert stamp.read_text() != '0' * 64 + ' run\n'


def test_a_failed_install_leaves_no_stamp(venv):
    result, _calls = _setup(venv, fail=True)
    assert result.returncode != 0
    assert not (venv / 'venv' / '.cyborg-setup').exists()
    # The next run tries again.
    assert _setup(venv)[1] != []
