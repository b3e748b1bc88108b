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

"""bindep.txt and tools/install-test-deps.sh name the same packages: the
Debian packages of bindep's ``test`` profile are exactly those the script
installs."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PLATFORMS = {'dpkg', 'rpm'}


def bindep_entries() -> list[tuple[str, set[str]]]:
    """(package, selectors) for each line of bindep.txt."""
    entries = []
    with open(os.path.join(ROOT, 'bindep.txt')) as f:
        for line in f:
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            match = re.fullmatch(r'([A-Za-z0-9][\w.+-]*)(?:\s+\[([^]]*)\])?',
                                 line)
            assert match, 'not a bindep line: %r' % line
            entries.append((match[1], set((match[2] or '').split())))
    return entries


def debian_packages(profile: str | None) -> set[str]:
    """Debian packages bindep lists for ``profile`` (None: the default,
    packages without a profile)."""
    found = set()
    for name, selectors in bindep_entries():
        platforms = {s.split(':', 1)[1] for s in selectors
                     if s.startswith('platform:')}
        profiles = {s for s in selectors if ':' not in s}
        if platforms and 'dpkg' not in platforms:
            continue
        if (profile is None and not profiles) or profile in profiles:
            found.add(name)
    return found


def install_test_deps_packages() -> set[str]:
    path = os.path.join(ROOT, 'tools', 'install-test-deps.sh')
    with open(path) as f:
        match = re.search(r'^packages=\(([^)]*)\)$', f.read(), re.M)
    assert match, 'no packages=(...) line in %s' % path
    return set(match[1].split())


def test_bindep_lines_parse():
    entries = bindep_entries()
    assert entries
    for name, selectors in entries:
        for selector in selectors:
            kind, _, value = selector.partition(':')
            if kind == 'platform':
                assert value in PLATFORMS, (name, selector)
            else:
                assert not value and re.fullmatch(r'[a-z]+', kind), (
                    name, selector)


def test_test_profile_is_what_install_test_deps_installs():
    script = install_test_deps_packages()
    assert 'postgresql' in script
    assert debian_packages('test') == script


def test_every_test_package_has_an_rpm_name():
    rpm_test = {name for name, selectors in bindep_entries()
                if 'test' in selectors and 'platform:dpkg' not in selectors}
    assert {'postgresql-server', 'mariadb-server', 'rabbitmq-server',
            'gcc', 'python3-devel'} <= rpm_test


def test_default_profile_has_git():
    assert 'git' in debian_packages(None)
