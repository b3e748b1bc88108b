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

"""Masking of serial numbers and MAC addresses in a capture.

Each distinct value gets a stand-in numbered in the order it is met
(``02:00:00:00:00:01``, a locally administered MAC; ``MASKED0001``),
so that a value read in two places stays the same value and two
captures of one host mask alike. Serial numbers are the whole text of
files named like :data:`SERIAL_FILES` and the value of ``Serial
Number : ...`` lines (``npu-smi``, ``nvidia-smi -q``); MAC addresses and
NVIDIA's GPU and MIG UUIDs (``GPU-<uuid>``, which name one board as a
serial number does; the nvidia driver's ``information`` file and
``nvidia-smi`` print them) are found anywhere.
"""

from __future__ import annotations

import re

SERIAL_FILES = frozenset(['serial', 'serial_number', 'board_serial',
                          'product_serial'])
_MAC = re.compile(r'(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}'
                  r'(?![0-9A-Fa-f:])')
_UUID = re.compile(r'\b(GPU|MIG)-([0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}'
                   r'[0-9a-fA-F]{12})\b')
_SERIAL_LINE = re.compile(r'(Serial Number\s*:[ \t]*)(\S+)', re.IGNORECASE)


class Masker:
    """Replaces serial numbers and MAC addresses, consistently."""

    def __init__(self) -> None:
        self._macs: dict[str, str] = {}
        self._serials: dict[str, str] = {}
        self._uuids: dict[str, str] = {}

    def mac(self, value: str) -> str:
        key = value.lower()
        if key not in self._macs:
            number = len(self._macs) + 1
            self._macs[key] = '02:00:00:%02x:%02x:%02x' % (
                number >> 16 & 0xff, number >> 8 & 0xff, number & 0xff)
        return self._macs[key]

    def serial(self, value: str) -> str:
        if value not in self._serials:
            self._serials[value] = 'MASKED%04d' % (len(self._serials) + 1)
        return self._serials[value]

    def uuid(self, kind: str, value: str) -> str:
        """A stand-in of a GPU (or MIG) UUID, still a UUID."""
        key = value.lower()
        if key not in self._uuids:
            self._uuids[key] = '00000000-0000-4000-8000-%012d' % (
                len(self._uuids) + 1)
        return '%s-%s' % (kind, self._uuids[key])

    def text(self, text: str) -> str:
        """``text`` with its MAC addresses, GPU UUIDs and ``Serial
        Number`` values masked."""
        text = _MAC.sub(lambda m: self.mac(m.group(0)), text)
        text = _UUID.sub(lambda m: self.uuid(m.group(1), m.group(2)), text)
        return _SERIAL_LINE.sub(
            lambda m: m.group(1) + self.serial(m.group(2)), text)

    def file(self, name: str, data: bytes) -> bytes:
        """The masked content of a file called ``name``; binary content
        is kept as it is."""
        try:
            text = data.decode('utf-8')
        except UnicodeDecodeError:
            return data
        if name in SERIAL_FILES and text.strip():
            value = text.strip()
            return text.replace(value, self.serial(value)).encode()
        return self.text(text).encode()
