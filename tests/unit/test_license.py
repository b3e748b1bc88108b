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

"""The repository is Apache-2.0: a LICENSE file and a header on every
source file (Python, shell, the devstack plugin and the migration
template). Empty files (package markers) need none."""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
#: Folders that hold the project's source; anything else (a virtualenv,
#: build output) is not walked.
SOURCE_DIRS = ('cyborg', 'tests', 'tools', 'devstack', 'doc', 'api-ref',
               'releasenotes', '.ci')
#: Third-party files kept under their own license (devstack's, vendored).
VENDORED = os.path.join('tests', 'devstack', 'vendor')
SOURCE_NAME = re.compile(r'\.(py|sh|mako)$')
#: Source files without an extension.
EXTENSIONLESS = {os.path.join('.ci', 'run'),
                 os.path.join('devstack', 'settings'),
                 os.path.join('devstack', 'lib', 'cyborg')}
HEADER_LINES = (
    'Licensed under the Apache License, Version 2.0 (the "License"); you may',
    'http://www.apache.org/licenses/LICENSE-2.0',
    'WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.',
)


def source_files() -> list[str]:
    found = ['setup.py']
    for top in SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            rel_dir = os.path.relpath(dirpath, ROOT)
            dirnames[:] = [d for d in dirnames
                           if not d.startswith(('.', '_build', '__pycache__'))
                           and os.path.join(rel_dir, d) != VENDORED]
            for name in filenames:
                rel = os.path.join(rel_dir, name)
                if SOURCE_NAME.search(name) or rel in EXTENSIONLESS:
                    found.append(rel)
    return sorted(found)


def test_license_file_is_apache_2():
    with open(os.path.join(ROOT, 'LICENSE')) as f:
        text = f.read()
    assert 'Apache License' in text and 'Version 2.0, January 2004' in text


def test_source_files_are_found():
    files = source_files()
    # The walk must see the service, the tests and the devstack plugin,
    # or the header test below would pass on nothing.
    for expected in ('cyborg/cmd/api.py', 'tests/unit/test_license.py',
                     'devstack/lib/cyborg', '.ci/run',
                     'cyborg/db/alembic/script.py.mako'):
        assert expected in files
    assert not any(f.startswith(VENDORED) for f in files)


@pytest.mark.parametrize('path', source_files())
def test_source_file_has_license_header(path):
    with open(os.path.join(ROOT, path)) as f:
        head = f.read(2000)
    if not head.strip():
        return
    for line in HEADER_LINES:
        assert line in head, '%s lacks the Apache license header' % path
