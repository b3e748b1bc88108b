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

"""Host capture and replay: what the drivers read on a host, as a tree
and the answers of the vendor commands they ran, packed in an archive
that ``[agent] host_root`` accepts in place of a host.

* :mod:`.recorder`: the host root and command runner that record what
  the drivers read and run.
* :mod:`.capture`: runs the enabled drivers through them and writes the
  archive (``cyborg-manage host capture``).
* :mod:`.replay`: turns a capture back into a host root and fake vendor
  commands answering as the host's did.
* :mod:`.check`: what each enabled driver reports on a host, what it
  leaves out and why (``cyborg-manage host check``).
"""
