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
"""Run phases of the devstack plugin through ``harness.sh``.

:func:`run` runs the plugin's phases for one node, with devstack's own
functions (``vendor/devstack``) and stand-ins for the system commands and
for the devstack functions that install or start things; a
:class:`Node` then tells what the phases called and wrote.
"""

from __future__ import annotations

import configparser
import dataclasses
import os
import subprocess
import sys

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       'harness.sh')
REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
STACK_PHASES = ('pre-install', 'install', 'post-config', 'extra',
                'test-config')


@dataclasses.dataclass
class Node:
    """One node's harness root and what its last run left there."""

    root: str
    returncode: int = 0
    output: str = ''

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def calls(self, phase: str | None = None) -> list[str]:
        """The recorded calls, of every phase run so far or of ``phase``."""
        calls, current = [], None
        with open(self.path('calls.log')) as f:
            for line in f.read().splitlines():
                if line.startswith('=== '):
                    current = line[4:]
                elif phase is None or phase == current:
                    calls.append(line)
        return calls

    def variables(self) -> dict[str, str]:
        """The plugin's variables after the last run (harness.sh's dump)."""
        with open(self.path('variables')) as f:
            return dict(line.split('=', 1) for line in f.read().splitlines())

    def ini(self, *parts: str) -> configparser.ConfigParser:
        """An INI file under the root (devstack's iniset writes them)."""
        # Not strict: an option given on several lines (uWSGI's env) reads
        # as its last line.
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        path = self.path(*parts)
        with open(path) as f:
            parser.read_file(f, path)
        return parser


def run(node: Node, phases, services: str, **env: str) -> Node:
    """Run ``phases`` of the plugin on ``node`` with ``services`` enabled.

    ``env`` sets more devstack variables. The result is kept in
    ``node.returncode`` and ``node.output``; a node may run several times
    (stack, then unstack and clean), its files staying between runs.
    """
    os.makedirs(node.root, exist_ok=True)
    environ = {'PATH': os.environ['PATH'], 'HOME': node.root,
               'LANG': 'C.UTF-8',
               # The plugin asks the installed cyborg for its API versions.
               'PYTHON': sys.executable,
               'PYTHONPATH': os.pathsep.join(
                   p for p in (REPO, os.environ.get('PYTHONPATH')) if p),
               'HARNESS_ROOT': node.root, 'CYBORG_REPO': REPO,
               'ENABLED_SERVICES': services}
    environ.update(env)
    result = subprocess.run(['bash', HARNESS] + list(phases), env=environ,
                            stdin=subprocess.DEVNULL, capture_output=True,
                            text=True, timeout=120, check=False)
    node.returncode = result.returncode
    node.output = result.stdout + result.stderr
    return node
