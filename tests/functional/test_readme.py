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

"""The README's commands, run as written, so that it cannot drift from
the code; and the commands of the all-in-one's ready message, as printed.

Every ``sh`` block of README.md runs, in order, in a bash session from
the checkout's root (``text`` blocks are what the tests cannot run: the
test suite itself, an example of options). A block that starts the
all-in-one (``./tools/run-all-in-one.sh ARGS``) begins a new session:
the all-in-one before it is stopped and one is started with ARGS. Only
what a test run must change is substituted: the ports and the state
directory the README names (``127.0.0.1:6666``, ``127.0.0.1:8778``,
``~/.local/share/cyborg``) and the virtualenv (``.venv/bin``: the one
running the tests, its ``openstack`` and cyborg's commands started
through the fork server as the fixtures start them); the start runs
that virtualenv's cyborg-all-in-one, which run-all-in-one.sh execs once
the virtualenv is set up.
"""

import dataclasses
import os
import re
import shlex
import subprocess

import pytest

from tests.functional import conftest
from tests.functional import forkserver
from tests.functional import servers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
README = os.path.join(ROOT, 'README.md')
START = './tools/run-all-in-one.sh'
BLOCK = re.compile(r'^```(\w*)\n(.*?)^```$', re.MULTILINE | re.DOTALL)
SESSION_TIMEOUT = 240


@dataclasses.dataclass
class Session:
    """An all-in-one started by the README, and the commands run
    against it."""
    start_args: list[str]
    commands: list[str] = dataclasses.field(default_factory=list)


def sessions(text: str) -> list[Session]:
    """The README's ``sh`` blocks, grouped by the all-in-one they run
    against."""
    result = []
    for language, body in BLOCK.findall(text):
        if language == 'text':
            continue
        assert language == 'sh', 'README block of unknown kind %r' % language
        if body.startswith(START):
            [line] = body.splitlines()
            result.append(Session(shlex.split(line)[1:]))
        else:
            assert result, 'README runs commands before the all-in-one'
            result[-1].commands.append(body)
    return result


def banner_commands(log: str) -> list[str]:
    """The shell commands of the all-in-one's ready message: its lines
    indented by two spaces that start with ``export``, ``openstack`` or
    ``curl``, with their continuation lines."""
    text = log[log.index(conftest.ALL_IN_ONE_RUNNING):]
    text = text[:text.index('Press Ctrl-C to stop.')]
    commands = []
    continued = False
    for line in text.splitlines():
        if continued or re.match(r'  (export|openstack|curl) ', line):
            commands.append(line)
            continued = line.endswith('\\')
    return commands


def test_the_start_script_runs_the_virtualenvs_all_in_one():
    """What the test substitutes for the start command is what the
    script runs."""
    with open(os.path.join(ROOT, START)) as f:
        lines = f.read().splitlines()
    assert lines[-2:] == ['tools/setup-venv.sh',
                          'exec .venv/bin/cyborg-all-in-one "$@"']


def test_the_readme_has_both_all_in_ones():
    with open(README) as f:
        found = sessions(f.read())
    assert [s.start_args for s in found] == [[], ['--demo-hardware']]
    assert all(s.commands for s in found)


@pytest.fixture(scope='module')
def readme_run(tmp_path_factory):
    """The output of each session of the README, run as written."""
    with open(README) as f:
        found = sessions(f.read())
    work = str(tmp_path_factory.mktemp('readme'))
    state_dir = os.path.join(work, 'state')
    # The virtualenv's scripts, the CLI's and cyborg's started the way
    # the fixtures start them (see forkserver.shim_directory).
    venv_bin = os.path.dirname(servers.venv_script('cyborg-all-in-one'))
    bin_dir = forkserver.shim_directory(venv_bin, os.path.join(work, 'bin'))
    api_port, placement_port = servers.free_port(), servers.free_port()
    substitutions = [
        ('127.0.0.1:6666', '127.0.0.1:%d' % api_port),
        ('127.0.0.1:8778', '127.0.0.1:%d' % placement_port),
        ('~/.local/share/cyborg', state_dir),
        ('$PWD/.venv/bin', bin_dir),
        ('.venv/bin/', bin_dir + '/'),
    ]
    outputs = []
    for number, session in enumerate(found):
        process = servers.CyborgProcess(
            'cyborg-all-in-one', None, work, name='allinone-%d' % number,
            args=session.start_args + [
                '--port', str(api_port),
                '--placement-port', str(placement_port),
                '--state-dir', state_dir])
        try:
            process.start()
            process.wait_log(conftest.ALL_IN_ONE_RUNNING,
                             conftest.START_TIMEOUT)
            script = '\n'.join(['set -euo pipefail'] + session.commands)
            for text, value in substitutions:
                script = script.replace(text, value)
            result = subprocess.run(
                ['bash', '-c', script], cwd=ROOT, stdin=subprocess.DEVNULL,
                capture_output=True, text=True, timeout=SESSION_TIMEOUT,
                check=False)
            output = result.stdout + result.stderr
            assert result.returncode == 0, (output, process.log_text())
            # Then the commands of the ready message, as printed (the
            # virtualenv it names in PATH standing in as above).
            commands = banner_commands(process.log_text())
            script = '\n'.join(['set -euo pipefail'] + commands)
            assert venv_bin in script
            result = subprocess.run(
                ['bash', '-c', script.replace(venv_bin, bin_dir)],
                cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
                text=True, timeout=SESSION_TIMEOUT, check=False)
            assert result.returncode == 0, (commands, result.stdout,
                                            result.stderr)
            outputs.append(output + result.stdout)
        finally:
            process.stop()
    return dict(zip(['plain', 'demo'], outputs, strict=True))


def test_the_fake_fpga_flow(readme_run):
    output = readme_run['plain']
    # The ready message's profile, shown by name.
    assert 'try-fpga' in output
    assert 'my-fpga' in output
    # Placement finds the profile's provider.
    assert '"provider_summaries": {"' in output
    # The Nova flow binds the ARQ to a fake FPGA's function.
    assert 'Bound\nTEST_PCI\n' in output


def test_the_demo_walk_throughs(readme_run):
    output = readme_run['demo']
    assert 'try-qat' in output
    assert output.count('Bound\n') == 5, output
    # The FPGA runs gzip after the bind, aes after programming.
    assert 'd8424dc4a4a3c413f89e433683f9040b' in output
    assert '3afb0c1d2e3f40516273849506a7b8c9' in output
    assert "MDEV\n{'asked_type': 'nvidia-223', 'bus': 'd8'" in output
    assert '"vf", "0", "vlan", "100"' in output
    assert "'bus': '3b', 'device': '00'" in output
    assert "PCI\n{'bus': '6b'" in output
