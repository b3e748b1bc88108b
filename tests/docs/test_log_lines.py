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

"""The admin guide's table of log lines against the log calls of the code.

Every ``LOG.info``, ``warning``, ``error``, ``exception`` and ``critical``
call under ``cyborg/`` must be explained in the "Log lines" section of
``doc/source/admin/index.rst``, at its level, and every line explained
there must be one the code emits.

In the guide a message is quoted with its variable parts as words in
capitals (``HOST``, ``UUID``; ``N`` in ``Ns`` for a number of seconds),
one for each variable of the log call; a quote ending with ``...``
stands for every message it begins. The
definition of each message starts with its level (``INFO``, ``WARNING``
or ``ERROR``; ``LOG.exception`` logs at ``ERROR`` with a traceback).
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
GUIDE = os.path.join(ROOT, 'doc', 'source', 'admin', 'index.rst')
LEVELS = {'info': 'INFO', 'warning': 'WARNING', 'error': 'ERROR',
          'exception': 'ERROR', 'critical': 'CRITICAL'}
# What a %-conversion of a log format becomes before the guide's pattern
# is matched against it.
MARKER = '\x00'
CONVERSION = re.compile(r'%(?:\([a-z_]+\))?[-#0 +]*\d*(?:\.\d+)?[sdrf]')
# Capitals that are words of the messages, not variable parts.
LITERAL_CAPITALS = {'ARQ', 'RPC', 'API', 'SIGHUP', 'GPU', 'MIG'}
PLACEHOLDER = re.compile(r'\b(?:N(?=s\b)|[A-Z][A-Z0-9_]*\b)')
# The notifier's back-off: _back_off(MESSAGE % ...) logs
# '%s; next try in %.1fs' with MESSAGE.
BACK_OFF = ('_back_off', '%s; next try in %.1fs')


@dataclasses.dataclass(frozen=True)
class Emitted:
    """One log call of the code."""

    where: str
    level: str
    format: str

    @property
    def rendered(self) -> str:
        text = CONVERSION.sub(MARKER, self.format)
        return text.replace('%%', '%')


@dataclasses.dataclass(frozen=True)
class Documented:
    """One message the guide explains."""

    message: str
    level: str | None

    @property
    def pattern(self) -> re.Pattern:
        message, rest = self.message, ''
        if message.endswith('...'):
            message, rest = message[:-3], '.*'
        parts, end = [], 0
        for match in PLACEHOLDER.finditer(message):
            if match.group() in LITERAL_CAPITALS:
                continue
            parts.append(re.escape(message[end:match.start()]))
            parts.append(re.escape(MARKER))
            end = match.end()
        parts.append(re.escape(message[end:]))
        return re.compile(''.join(parts) + rest, re.DOTALL)

    def explains(self, emitted: Emitted) -> bool:
        return self.pattern.fullmatch(emitted.rendered) is not None


def _string(node) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    # 'message %s' % value: the format is the constant.
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _string(node.left)
    return None


def emitted_lines() -> list[Emitted]:
    """The log calls under cyborg/ at INFO and above."""
    found = []
    for directory, _dirs, files in os.walk(os.path.join(ROOT, 'cyborg')):
        for name in sorted(files):
            if not name.endswith('.py'):
                continue
            path = os.path.join(directory, name)
            with open(path) as f:
                source = f.read()
            # Parsed only where a log call can be: every xdist worker
            # runs this at collection.
            if 'LOG.' not in source and BACK_OFF[0] not in source:
                continue
            tree = ast.parse(source, path)
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call)
                        and isinstance(node.func, ast.Attribute)
                        and node.args):
                    continue
                where = '%s:%d' % (os.path.relpath(path, ROOT), node.lineno)
                func = node.func
                if (isinstance(func.value, ast.Name)
                        and func.value.id == 'LOG' and func.attr in LEVELS):
                    text = _string(node.args[0])
                    assert text is not None, (
                        '%s: the message is no string literal' % where)
                    if (text, func.attr) == (BACK_OFF[1], 'error'):
                        continue  # the carrier of the back-off messages
                    found.append(Emitted(where, LEVELS[func.attr], text))
                elif func.attr == BACK_OFF[0]:
                    text = _string(node.args[0])
                    assert text is not None, where
                    found.append(Emitted(
                        where, 'ERROR', BACK_OFF[1].replace('%s', text, 1)))
    return found


def documented_lines() -> list[Documented]:
    """The messages of the guide's "Log lines" section."""
    with open(GUIDE) as f:
        text = f.read()
    match = re.search(r'^Log lines\n=+\n(.*?)(?=^[^\n]+\n=+\n|\Z)', text,
                      re.MULTILINE | re.DOTALL)
    assert match, 'no "Log lines" section in %s' % GUIDE
    lines = match.group(1).splitlines()
    found = []
    for index, line in enumerate(lines):
        body = lines[index + 1] if index + 1 < len(lines) else ''
        # A definition's term: quotes, then the indented definition.
        if not line.startswith('``') or not re.match(r'\s+\S', body):
            continue
        level = re.match(r'\s+(INFO|WARNING|ERROR|CRITICAL)\b', body)
        for message in re.findall(r'``(.+?)``', line):
            found.append(Documented(message,
                                    level.group(1) if level else None))
    return found


EMITTED = emitted_lines()
DOCUMENTED = documented_lines()


def test_the_code_and_the_guide_have_log_lines():
    assert len(EMITTED) > 40
    assert len(DOCUMENTED) > 40


@pytest.mark.parametrize('emitted', EMITTED, ids=lambda e: e.where)
def test_every_log_line_is_explained_at_its_level(emitted):
    explained = [d for d in DOCUMENTED if d.explains(emitted)]
    assert explained, '%s: %r (%s) is not in the admin guide' % (
        emitted.where, emitted.format, emitted.level)
    for documented in explained:
        assert documented.level == emitted.level, (
            '%r is %s in the guide, %s at %s' % (
                documented.message, documented.level, emitted.level,
                emitted.where))


@pytest.mark.parametrize('documented', DOCUMENTED,
                         ids=lambda d: d.message[:50])
def test_every_explained_line_is_emitted(documented):
    assert documented.level, (
        '%r: its explanation does not start with its level'
        % documented.message)
    assert any(documented.explains(e) for e in EMITTED), (
        '%r: the code logs no such line' % documented.message)


def test_patterns():
    """How the guide's quotes read."""
    line = Emitted('x', 'WARNING',
                   'Releasing %d attach handles failed; after %ds (%r)')
    assert Documented('Releasing N attach handles failed; after Ns (NAME)',
                      'WARNING').explains(line)
    assert Documented('Releasing N attach handles failed...',
                      'WARNING').explains(line)
    assert not Documented('Releasing N attach handles failed',
                          'WARNING').explains(line)
    assert not Documented('Releasing N handles failed; after Ns (NAME)',
                          'WARNING').explains(line)
    arqs = Emitted('x', 'INFO', 'Created %d ARQs for %s')
    assert Documented('Created N ARQs for NAME', 'INFO').explains(arqs)
    assert not Documented('Created N ARQ for NAME', 'INFO').explains(arqs)
