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

"""The base of the domain's string enums (Python 3.10 has no
``enum.StrEnum``)."""

import enum


class StrEnum(str, enum.Enum):
    """A str enum that reads as its value (in messages and logs too);
    JSON and the database see the value."""

    def __str__(self) -> str:
        return str(self.value)
