"""The all-in-one shows its host's devices, and Placement schedules them.

What a new user sees after the README's run command: the fake driver's
device in the API and, in the embedded Placement, a provider under the
host's compute node that allocation candidates find.
"""

import re
import time

import requests

from cyborg.clients import placement as placement_client


def _placement_url(allinone) -> str:
    with open(allinone.processes[0].log) as f:
        match = re.search(r'Placement:\s+(http://\S+)', f.read())
    assert match, allinone.logs()
    return match.group(1)


def _wait(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def test_devices_are_listed(allinone):
    devices = _wait(lambda: requests.get(
        allinone.url + '/v2/devices', timeout=10).json()['devices'])
    assert [d['type'] for d in devices] == ['FPGA']


def test_allocation_candidates_find_the_device(allinone):
    client = placement_client.PlacementClient.for_endpoint(
        _placement_url(allinone))

    def candidates():
        try:
            response = client.request(
                'GET', '/allocation_candidates?resources=FPGA:1'
                       '&required=CUSTOM_FAKE_DEVICE,OWNER_CYBORG')
        except placement_client.PlacementError:
            return None  # the trait does not exist until the first sync
        return response.json()['provider_summaries']

    summaries = _wait(candidates)
    deployable = requests.get(allinone.url + '/v2/deployables',
                              timeout=10).json()['deployables'][0]
    assert list(summaries) == [deployable['rp_uuid']]
    summary = summaries[deployable['rp_uuid']]
    assert summary['resources'] == {'FPGA': {'capacity': 4, 'used': 0}}
    assert set(summary['traits']) == {'OWNER_CYBORG', 'CUSTOM_FAKE_DEVICE'}
