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

"""What cyborg's entry points ask of eventlet, which cyborg does not use.

oslo.messaging imports eventlet where it is installed (through oslo.service
and futurist; oslo.service requires it). cyborg runs on native threads and
never monkey-patches, so its console scripts (:mod:`cyborg.cmd`) and its
WSGI module (:mod:`cyborg.wsgi`) import this module first, which

* turns off eventlet's green DNS resolver (``EVENTLET_NO_GREENDNS``, unless
  the environment sets it): nothing resolves a name through it, and its
  import (dnspython) is about 0.2 s of every process's start-up CPU;
* silences eventlet's deprecation warning, which is about code cyborg
  does not run.
"""

import os
import warnings

os.environ.setdefault('EVENTLET_NO_GREENDNS', 'yes')
warnings.filterwarnings('ignore', message=r'(?s).*Eventlet is deprecated')
