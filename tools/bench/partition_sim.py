#!/usr/bin/env python3
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

"""Capacity simulator: static MIG layouts against ``homogeneous`` mode.

Replays one trace of partition requests and releases against a fleet
of ``--gpus`` GPUs of one model, with that model's real placement rules
(the profiles, instance counts and placements of NVIDIA's MIG user
guide, as the fake ``nvidia-smi`` of :mod:`cyborg.allinone.fake_mig`
applies them: every partition is created and destroyed on a simulated
GPU, so a layout or grant the hardware would refuse fails here too).

The trace (``--requests``, ``--seed``):

* Requests arrive as a Poisson process (mean inter-arrival time 1).
* Each asks for one MIG profile: 1g, 2g, 3g, 4g or 7g (the model's
  1g.5gb, 2g.10gb... profiles without media extensions). Demand drifts:
  the trace has ``--phases`` equal phases (default 4); in phase ``k``
  the mix is half the base mix (1g 40 %, 2g 25 %, 3g 20 %, 4g 5 %,
  7g 10 %) and half one profile, phase ``k`` favouring 1g, 2g, 3g, 7g,
  1g... in turn (tenants' needs change: a training week, an inference
  week).
* Each holds its partition for an exponential duration whose mean is
  set so that the offered load, in compute slices, is ``--load``
  (default 0.85) of the fleet's.

Placement policies, on the same trace:

* ``static:<layout>``: every GPU is cut once into the layout (e.g.
  ``3x2g+1g``), as an operator does today; a request takes a free
  partition of its profile or is rejected. Every maximal layout of the
  model is tried, plus ``static:matched``, the mix of layouts closest to
  the trace's average demand (an operator who knew the whole trace in
  advance). The best static result is the comparison's baseline.
* ``homogeneous``: each GPU serves one profile at a time, its inventory
  total = instances held + still creatable (what the driver reports);
  Placement grants only within it. A request goes to the fullest GPU
  serving its profile that has room, else an empty GPU switches to its
  profile, else it is rejected. Every grant is created on the simulated
  GPU: one that fails is counted as granted-but-unrealizable (target 0).

Printed per policy: requests placed, rejected, rejected although some
GPU had the compute slices free by count (stranded capacity: wrong
profile or wrong position), the time-averaged share of compute slices
idle, and granted-but-unrealizable. Target: ``homogeneous`` places at
least 25 % more requests than the best static layout.

    .venv/bin/python tools/bench/partition_sim.py [--gpus 64]
        [--requests 10000] [--model 'NVIDIA A100-SXM4-40GB'] [--seed 1]
"""

import argparse
import dataclasses
import heapq
import itertools
import os
import random
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, ROOT)

from cyborg.allinone import fake_mig  # noqa: E402

SIZES = ('1g', '2g', '3g', '4g', '7g')
BASE_MIX = {'1g': 0.40, '2g': 0.25, '3g': 0.20, '4g': 0.05, '7g': 0.10}
FAVOURED = ('1g', '2g', '3g', '7g')


@dataclasses.dataclass(frozen=True)
class Request:
    arrival: float
    duration: float
    size: str


def profiles_by_size(model: fake_mig.Model) -> dict[str, fake_mig.Profile]:
    """The model's profile of each size: the smallest-memory one
    without media extensions (1g.5gb, not 1g.10gb or 1g.5gb+me)."""
    found: dict[str, fake_mig.Profile] = {}
    for profile in model.profiles:
        size = profile.name.split('.')[0]
        if size in SIZES and '+me' not in profile.name and (
                size not in found
                or profile.memory_slices < found[size].memory_slices):
            found[size] = profile
    return found


def trace(count: int, phases: int, load: float, capacity: int,
          compute: dict[str, int], rng: random.Random) -> list[Request]:
    mean_slices = sum(BASE_MIX[s] * compute[s] for s in SIZES)
    # Little's law: concurrent slices = rate (1) x duration x slices.
    mean_duration = load * capacity / mean_slices
    requests, now = [], 0.0
    for n in range(count):
        favoured = FAVOURED[min(n * phases // count, phases - 1)
                            % len(FAVOURED)]
        weights = [BASE_MIX[s] / 2 + (0.5 if s == favoured else 0)
                   for s in SIZES]
        now += rng.expovariate(1.0)
        requests.append(Request(now, rng.expovariate(1 / mean_duration),
                                rng.choices(SIZES, weights)[0]))
    return requests


def maximal_layouts(model: fake_mig.Model,
                    sizes: dict[str, fake_mig.Profile]
                    ) -> dict[str, tuple[tuple[str, int], ...]]:
    """Every layout that can be created on an empty GPU and leaves no
    room for another partition: name -> ((size, start), ...), one
    placement per multiset of sizes."""
    found: dict[tuple[str, ...], tuple[tuple[str, int], ...]] = {}

    def extend(gpu: fake_mig.MigGpu, made: tuple[tuple[str, int], ...]
               ) -> None:
        grown = False
        for size, profile in sizes.items():
            for start in profile.starts:
                if gpu.fits(profile, start):
                    grown = True
                    child = fake_mig.MigGpu(0, model, gis=list(gpu.gis))
                    child.create(profile, start)
                    extend(child, tuple(sorted(made + ((size, start),))))
        if not grown:
            found.setdefault(tuple(sorted(s for s, _b in made)), made)

    extend(fake_mig.MigGpu(0, model), ())
    return {layout_name(key): found[key] for key in sorted(found)}


def layout_name(layout: tuple[str, ...]) -> str:
    counts = sorted(((layout.count(s), s) for s in set(layout)),
                    key=lambda c: -int(c[1][:-1]))
    return '+'.join(s if n == 1 else '%dx%s' % (n, s) for n, s in counts)


@dataclasses.dataclass
class Result:
    name: str
    placed: int = 0
    rejected: int = 0
    stranded: int = 0  # rejected with the slices free on one GPU
    unrealizable: int = 0
    idle_area: float = 0.0  # idle compute slices x time
    span: float = 0.0

    def idle_share(self, capacity: int) -> float:
        return self.idle_area / (capacity * self.span) if self.span else 0


class Fleet:
    """The GPUs and the partitions they hold."""

    def __init__(self, model: fake_mig.Model, gpus: int,
                 sizes: dict[str, fake_mig.Profile]) -> None:
        self.model = model
        self.sizes = sizes
        self.gpus = [fake_mig.MigGpu(i, model) for i in range(gpus)]
        self.used = [0] * gpus  # compute slices in use per GPU

    def room_by_count(self, size: str) -> bool:
        need = self.sizes[size].compute
        return any(self.model.compute_slices - used >= need
                   for used in self.used)


class Static(Fleet):
    """Partitions made once; a request takes a free one of its size."""

    def __init__(self, model, gpus, sizes, layouts: list[tuple[str, ...]]):
        super().__init__(model, gpus, sizes)
        self.free: dict[str, list[tuple[int, int]]] = {s: [] for s in sizes}
        for gpu, layout in zip(self.gpus, itertools.cycle(layouts)):
            for size, start in layout:
                gi = gpu.create(sizes[size], start)
                self.free[size].append((gpu.index, gi.id))

    def place(self, size: str) -> tuple | None:
        if not self.free[size]:
            return None
        gpu, gi = self.free[size].pop()
        self.used[gpu] += self.sizes[size].compute
        return (size, gpu, gi)

    def release(self, held: tuple) -> None:
        size, gpu, gi = held
        self.used[gpu] -= self.sizes[size].compute
        self.free[size].append((gpu, gi))


class Homogeneous(Fleet):
    """One profile per GPU; total = held + still creatable."""

    def __init__(self, model, gpus, sizes):
        super().__init__(model, gpus, sizes)
        self.serving: list[str | None] = [None] * gpus
        self.unrealizable = 0

    def total(self, gpu: fake_mig.MigGpu, size: str) -> int:
        profile = self.sizes[size]
        return gpu.count(profile) + gpu.free(profile)

    def place(self, size: str) -> tuple | None:
        candidates = [g for g in self.gpus if self.serving[g.index] == size
                      and len(g.gis) < self.total(g, size)]
        if candidates:
            # The fullest first: keeps other GPUs empty, free to switch.
            gpu = max(candidates, key=lambda g: (len(g.gis), -g.index))
        else:
            empty = [g for g in self.gpus if not g.gis]
            if not empty:
                return None
            gpu = empty[0]
            self.serving[gpu.index] = size  # an empty GPU follows demand
        # Placement granted it: the device must create it.
        try:
            gi = gpu.create(self.sizes[size])
        except fake_mig.MigError:
            self.unrealizable += 1
            return None
        self.used[gpu.index] += self.sizes[size].compute
        return (size, gpu.index, gi.id)

    def release(self, held: tuple) -> None:
        size, gpu, gi = held
        self.gpus[gpu].destroy(gi)
        self.used[gpu] -= self.sizes[size].compute


def replay(fleet, name: str, requests: list[Request]) -> Result:
    result = Result(name)
    capacity = fleet.model.compute_slices * len(fleet.gpus)
    ends: list[tuple[float, int, tuple]] = []
    now = 0.0
    for n, request in enumerate(requests):
        while ends and ends[0][0] <= request.arrival:
            end, _n, held = heapq.heappop(ends)
            result.idle_area += (capacity - sum(fleet.used)) * (end - now)
            now = end
            fleet.release(held)
        result.idle_area += (capacity - sum(fleet.used)) * (
            request.arrival - now)
        now = request.arrival
        held = fleet.place(request.size)
        if held is None:
            result.rejected += 1
            result.stranded += fleet.room_by_count(request.size)
        else:
            result.placed += 1
            heapq.heappush(ends, (now + request.duration, n, held))
    result.span = now
    result.unrealizable = getattr(fleet, 'unrealizable', 0)
    return result


def matched_layouts(layouts: dict[str, tuple[str, ...]], gpus: int,
                    requests: list[Request],
                    sizes: dict[str, fake_mig.Profile]) -> list:
    """Layouts, one per GPU, whose partitions follow the trace's
    average concurrent demand per size (greedy)."""
    mean_duration = sum(r.duration for r in requests) / len(requests)
    rate = len(requests) / requests[-1].arrival
    want = {s: rate * mean_duration * sum(r.size == s for r in requests)
            / len(requests) for s in sizes}
    chosen = []
    for _gpu in range(gpus):
        def gain(layout):
            counts = [size for size, _start in layout]
            return sum(min(counts.count(s), max(want[s], 0))
                       * sizes[s].compute for s in sizes)
        best = max(layouts.values(), key=gain)
        for size, _start in best:
            want[size] -= 1
        chosen.append(best)
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--gpus', type=int, default=64)
    parser.add_argument('--requests', type=int, default=10000)
    parser.add_argument('--phases', type=int, default=4)
    parser.add_argument('--load', type=float, default=0.85)
    parser.add_argument('--model', default='NVIDIA A100-SXM4-40GB',
                        choices=sorted(fake_mig.MODELS))
    parser.add_argument('--seed', type=int, default=1)
    args = parser.parse_args()
    model = fake_mig.MODELS[args.model]
    sizes = profiles_by_size(model)
    compute = {s: p.compute for s, p in sizes.items()}
    capacity = model.compute_slices * args.gpus
    rng = random.Random(args.seed)
    requests = trace(args.requests, args.phases, args.load, capacity,
                     {s: compute.get(s, 0) for s in SIZES}, rng)
    requests = [r for r in requests if r.size in sizes]
    layouts = maximal_layouts(model, sizes)
    results = [replay(Static(model, args.gpus, sizes, [layout]),
                      'static:' + name, requests)
               for name, layout in layouts.items()]
    results.append(replay(Static(model, args.gpus, sizes, matched_layouts(
        layouts, args.gpus, requests, sizes)), 'static:matched', requests))
    homogeneous = replay(Homogeneous(model, args.gpus, sizes),
                         'homogeneous', requests)
    print('%s x %d, %d requests (seed %d, load %.2f, %d phases)' % (
        args.model, args.gpus, len(requests), args.seed, args.load,
        args.phases))
    print('%-26s %7s %8s %9s %7s %13s' % (
        'policy', 'placed', 'rejected', 'stranded', 'idle', 'unrealizable'))
    for result in sorted(results, key=lambda r: -r.placed) + [homogeneous]:
        print('%-26s %7d %8d %9d %6.1f%% %13d' % (
            result.name, result.placed, result.rejected, result.stranded,
            100 * result.idle_share(capacity), result.unrealizable))
    best = max(results, key=lambda r: r.placed)
    gain = homogeneous.placed / best.placed - 1 if best.placed else 0
    print('homogeneous vs best static (%s): %+.1f%% placed; '
          'granted-but-unrealizable: %d; target >= +25%% and 0: %s' % (
              best.name, 100 * gain, homogeneous.unrealizable,
              'met' if gain >= 0.25 and homogeneous.unrealizable == 0
              else 'NOT met'))
    return 0


if __name__ == '__main__':
    sys.exit(main())
