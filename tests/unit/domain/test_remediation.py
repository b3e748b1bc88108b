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

"""The remediation catalog (defaults, overrides) and the agent-side
state: recovery after N clean reports, sticky signals, resets, host
reboots, and no flapping under a random storm of signals."""

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import pytest

from cyborg.domain import remediation as rem
from cyborg.domain import taints

NO_SCHEDULE = taints.Effect.NO_SCHEDULE
NONE = taints.Effect.NONE
DEV = ('nvidia_gpu_driver', '0000:3b:00.0')
OTHER = ('nvidia_gpu_driver', '0000:d8:00.0')


def tracker(*overrides, n=3):
    return rem.Tracker(rem.load_catalog(overrides), n)


def report(t, *names, device=DEV, **more):
    signals = {device: [rem.Signal(name, 'seen %s' % name)
                        for name in names]}
    signals.update(more.get('others', {}))
    t.observe(signals)
    return t.taints(device)


def summary(found):
    return [(t.key, str(t.effect), t.value) for t in found]


# The default catalog ---------------------------------------------------------

@pytest.mark.parametrize('xid', [13, 31, 43, 45, 68, 109])
def test_application_xids_are_ignored(xid):
    assert rem.load_catalog(()).lookup('xid.%d' % xid).action == 'ignore'
    assert report(tracker(), 'xid.%d' % xid) == []


def test_xid_94_degrades_and_recovers():
    t = tracker()
    assert summary(report(t, 'xid.94')) == [('cyborg.xid.94', 'None',
                                             'xid.94')]
    assert not rem.unhealthy(t.taints(DEV))
    for _ in range(2):
        assert report(t) != []
    assert report(t) == []


@pytest.mark.parametrize('xid', [48, 119])
def test_reset_xids_taint_until_reset(xid):
    t = tracker()
    name = 'xid.%d' % xid
    assert summary(report(t, name)) == [('cyborg.%s' % name, 'NoSchedule',
                                         name)]
    for _ in range(10):  # no recovery by clean reports
        assert report(t) != []
    assert t.resets_due() == [DEV]
    assert 'reset pending' in t.taints(DEV)[0].reason
    t.reset_result(DEV, rem.ResetOutcome.DONE)
    assert t.taints(DEV) == [] and t.resets_due() == []


def test_a_failed_reset_escalates_to_a_host_reboot():
    t = tracker()
    report(t, 'xid.48')
    t.observe({DEV: [], OTHER: []})
    t.reset_result(DEV, rem.ResetOutcome.FAILED)
    assert t.resets_due() == []  # never tried again
    assert summary(t.taints(DEV)) == [
        ('cyborg.reboot-required', 'NoSchedule', 'host'),
        ('cyborg.xid.48', 'NoSchedule', 'xid.48')]
    assert 'reset failed' in t.taints(DEV)[1].reason
    # Every device of the host.
    assert summary(t.taints(OTHER)) == [
        ('cyborg.reboot-required', 'NoSchedule', 'host')]
    assert 'xid.48 on 0000:3b:00.0' in t.taints(OTHER)[0].reason


def test_a_failed_reset_can_escalate_to_a_taint_only():
    t = tracker('xid.48: escalate=taint')
    report(t, 'xid.48')
    t.reset_result(DEV, rem.ResetOutcome.FAILED)
    assert summary(t.taints(DEV)) == [('cyborg.xid.48', 'NoSchedule',
                                       'xid.48')]
    assert t.reboot_reasons() == []


def test_an_unsupported_reset_keeps_the_taint():
    t = tracker()
    report(t, 'xid.119')
    t.reset_result(DEV, rem.ResetOutcome.UNSUPPORTED)
    assert t.resets_due() == []
    assert t.reboot_reasons() == []
    assert 'cannot do' in t.taints(DEV)[0].reason
    assert t.taints(DEV)[0].effect == NO_SCHEDULE


def test_xid_79_taints_every_device_of_the_host():
    t = tracker()
    t.observe({DEV: [rem.Signal('xid.79')], OTHER: []})
    assert rem.REBOOT_KEY in {x.key for x in t.taints(OTHER)}
    for _ in range(5):
        t.observe({DEV: [], OTHER: []})
    assert rem.unhealthy(t.taints(OTHER))  # sticky until reboot
    assert t.resets_due() == []


def test_an_unknown_xid_taints_and_recovers():
    t = tracker()
    assert summary(report(t, 'xid.62')) == [('cyborg.xid.62', 'NoSchedule',
                                             'xid.62')]
    for _ in range(3):
        report(t)
    assert t.taints(DEV) == []


def test_a_later_xid_154_cancels_earlier_ones():
    t = tracker()
    report(t, 'xid.48', 'xid.79')
    assert len(report(t)) == 3
    assert report(t, 'xid.154.none') == []
    assert t.reboot_reasons() == [] and t.resets_due() == []


def test_xid_154_actions():
    catalog = rem.load_catalog(())
    assert catalog.lookup('xid.154.gpu-reset-required').action == (
        'reset_device')
    assert catalog.lookup('xid.154.node-reboot-required').action == (
        'reboot_host')


@pytest.mark.parametrize('signal, key, effect', [
    ('unhealthy', 'cyborg.unhealthy', 'NoSchedule'),
    ('pcie.gone', 'cyborg.unhealthy', 'NoSchedule'),
    ('pcie.aer-fatal', 'cyborg.pcie.aer-fatal', 'NoSchedule'),
    ('pcie.aer-nonfatal', 'cyborg.pcie.aer-nonfatal', 'None'),
    ('pcie.link-width', 'cyborg.pcie.link-width', 'None'),
    ('pcie.link-speed', 'cyborg.pcie.link-speed', 'None'),
    ('vendor.unknown', 'cyborg.vendor.unknown', 'None'),
])
def test_pcie_and_driver_signals(signal, key, effect):
    assert summary(report(tracker(), signal)) == [(key, effect, signal)]


def test_the_drivers_verdict_recovers_at_the_next_clean_report():
    t = tracker()
    assert rem.unhealthy(report(t, 'unhealthy'))
    assert report(t) == []


def test_two_signals_of_one_key_give_one_taint_the_strongest():
    t = tracker('pcie.link-width: key=cyborg.unhealthy')
    found = report(t, 'pcie.link-width', 'unhealthy')
    assert summary(found) == [('cyborg.unhealthy', 'NoSchedule',
                               'unhealthy')]


def test_every_key_of_the_default_catalog_is_a_valid_taint_key():
    for remedy in rem.load_catalog(()):
        taints.trait_name(remedy.taint_key(remedy.pattern.replace('*', '1')))


def test_a_device_that_goes_is_forgotten_unless_its_driver_failed():
    t = tracker()
    report(t, 'xid.48')
    t.observe({}, keep=[DEV])
    assert t.taints(DEV) != []
    t.observe({})
    assert t.taints(DEV) == [] and t.devices() == []


# Overrides -------------------------------------------------------------------

def test_overrides_change_and_add_entries():
    catalog = rem.load_catalog([
        'xid.94: action=ignore',
        'xid.48: action=taint effect=NoExecute sticky=true',
        'vendor.*: action=taint recover_after=5 key=vendor.bad',
        'xid.31: action=degrade cancels=xid.94,xid.92'])
    assert catalog.lookup('xid.94').action == 'ignore'
    entry = catalog.lookup('xid.48')
    assert (entry.action, entry.effect, entry.sticky) == (
        'taint', 'NoExecute', True)
    assert entry.description == 'double-bit ECC error'  # kept
    vendor = catalog.lookup('vendor.thermal')
    assert (vendor.recover_after, vendor.taint_key('vendor.thermal')) == (
        5, 'vendor.bad')
    assert catalog.lookup('xid.31').cancels == ('xid.94', 'xid.92')


def test_a_sticky_override_never_recovers_by_clean_reports():
    t = tracker('pcie.aer-nonfatal: sticky=true')
    report(t, 'pcie.aer-nonfatal')
    for _ in range(10):
        assert report(t) != []


def test_recover_after_of_an_entry_wins_over_the_default():
    t = tracker('xid.94: recover_after=1', n=5)
    report(t, 'xid.94')
    assert report(t) == []


@pytest.mark.parametrize('text, message', [
    ('xid.48', 'must read'),
    (': action=ignore', 'must read'),
    ('xid.48: action', 'is not field=value'),
    ('xid.48: action=explode', 'explode'),
    ('xid.48: effect=Sometimes', 'Sometimes'),
    ('xid.48: sticky=perhaps', 'sticky must be'),
    ('xid.48: recover_after=-1', 'recover_after must be'),
    ('xid.48: colour=red', 'unknown field'),
    ('xid.48: key=Not_A_Key', 'taint key'),
    ('xid.48: escalate=ignore', 'escalate'),
    ('vendor.new: effect=None', 'needs an action'),
    ('XID.48: action=ignore', 'signal pattern'),
])
def test_bad_overrides_are_refused_with_a_reason(text, message):
    with pytest.raises(ValueError, match=message):
        rem.load_catalog([text])


def test_recovery_reports_must_be_positive():
    with pytest.raises(ValueError):
        rem.Tracker(rem.load_catalog(()), 0)


# No flapping -----------------------------------------------------------------

SIGNALS = ['xid.94', 'xid.62', 'pcie.aer-nonfatal', 'pcie.link-width',
           'pcie.aer-fatal', 'xid.13']


@settings(max_examples=200, deadline=None, derandomize=True)
@given(n=st.integers(1, 5),
       storm=st.lists(st.sets(st.sampled_from(SIGNALS)), max_size=40))
def test_no_flapping_under_a_random_storm_of_signals(n, storm):
    """A recovering signal's taint is on exactly while the signal was
    seen in one of the last n reports: it never drops between two
    sightings less than n reports apart, and it goes after n clean
    reports in a row."""
    t = rem.Tracker(rem.load_catalog(()), n)
    catalog = t.catalog
    for index, seen in enumerate(storm):
        t.observe({DEV: [rem.Signal(name) for name in sorted(seen)]})
        on = {taint.value for taint in t.taints(DEV)}
        window = set().union(*storm[max(0, index - n + 1):index + 1])
        expected = {name for name in window
                    if catalog.lookup(name).action != 'ignore'}
        assert on == expected


@settings(max_examples=100, deadline=None, derandomize=True)
@given(storm=st.lists(st.sets(st.sampled_from(SIGNALS + ['xid.48',
                                                         'xid.79'])),
                      max_size=30))
def test_held_signals_never_go_by_themselves(storm):
    """Once seen, a reset or reboot signal stays whatever follows."""
    t = rem.Tracker(rem.load_catalog(()), 1)
    held = set()
    for seen in storm:
        t.observe({DEV: [rem.Signal(name) for name in sorted(seen)]})
        held |= seen & {'xid.48', 'xid.79'}
        on = {taint.value for taint in t.taints(DEV)}
        assert held <= on


@pytest.mark.parametrize('name', ['Xid.48', '48', 'xid 48', '',
                                  'x' * (rem.SIGNAL_MAX_LENGTH + 1)])
def test_a_signal_name_becomes_a_taint_key_or_is_refused(name):
    with pytest.raises(ValueError, match='signal name'):
        rem.Signal(name)


def test_the_longest_signal_name_gives_a_valid_key():
    name = 'x' * rem.SIGNAL_MAX_LENGTH
    assert summary(report(tracker(), name)) == [('cyborg.' + name, 'None',
                                                 name)]


def test_the_option_default_is_the_trackers():
    from cyborg.conf import remediation as remediation_opts

    [option] = [opt for opt in remediation_opts.opts
                if opt.name == 'recovery_reports']
    assert option.default == rem.DEFAULT_RECOVERY_REPORTS
