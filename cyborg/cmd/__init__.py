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

"""Console scripts."""

import warnings

# Libraries pulled in by oslo.messaging import eventlet when it is
# installed; cyborg uses native threads and never monkey-patches.
warnings.filterwarnings('ignore', message=r'(?s).*Eventlet is deprecated')
