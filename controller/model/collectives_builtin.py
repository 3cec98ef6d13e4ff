"""The built-in collectives (DESIGN.md, ML workloads), written as data in the form an intent's
``collectives:`` takes and read by the same parser (:mod:`controller.model.collectives`).

With ``n`` members, ``B`` bytes per iteration:

* ``ring_allreduce``: a reduce-scatter then an all-gather around the ring of the listed order, each
  moving (n-1)/n of B to the next member (2(n-1)/n x B in all, the bandwidth-optimal ring);
* ``reduce_scatter``, ``all_gather``: one of those two phases;
* ``tree_allreduce``: a binary tree over the listed order (member i's parent is (i-1)//2): B up to
  the parent, then B down to each child;
* ``all_to_all``: B/n from each member to each other;
* ``all_to_all_v``: B from each member, split over the others in proportion to row i of the
  ``skew`` matrix (the diagonal is ignored; by default ``1 + j % 3``: experts of three
  popularities, which is also the shape the classifier compares a measured group with);
* ``pipeline``: B from each stage to the next (no wrap);
* ``hierarchical_allreduce``: members in groups of ``local`` consecutive ones (a server or a rail
  group): a reduce-scatter within the group, an all-reduce ring across the groups among the members
  of the same rail (i % local) on B/local each, an all-gather within the group;
* ``kv_transfer``: the first ``prefill`` members (n // 2 by default) send B each per iteration, split
  evenly over the decode members (the rest): a disaggregated inference's KV-cache transfer.
"""

from __future__ import annotations

import yaml

from controller.model.collectives import Registry, parse_template

__all__ = ["BUILTINS", "BUILTIN_TEXT"]

BUILTIN_TEXT = """
ring_allreduce:
  phases:
    - {from: all, to: "(i + 1) % n", bytes: "(n - 1) / n * B"}    # reduce-scatter
    - {from: all, to: "(i + 1) % n", bytes: "(n - 1) / n * B"}    # all-gather
reduce_scatter:
  phases:
    - {from: all, to: "(i + 1) % n", bytes: "(n - 1) / n * B"}
all_gather:
  phases:
    - {from: all, to: "(i + 1) % n", bytes: "(n - 1) / n * B"}
tree_allreduce:
  phases:
    - {from: "range(1, n)", to: "(i - 1) // 2", bytes: B}                 # reduce up
    - {from: all, to: "range(2 * i + 1, min(2 * i + 3, n))", bytes: B}    # broadcast down
all_to_all:
  phases:
    - {from: all, to: others, bytes: "B / n"}
all_to_all_v:
  params:
    skew: {kind: matrix, default: "1 + j % 3"}
  phases:
    - {from: all, to: others, bytes: "B * skew[i][j] / (sum(skew[i]) - skew[i][i])"}
pipeline:
  phases:
    - {from: "range(0, n - 1)", to: "i + 1", bytes: B}
hierarchical_allreduce:
  params:
    local: {kind: number, default: 2}
  where: ["local >= 1", "n % local == 0"]
  phases:
    - {from: all, to: "i - i % local + (i % local + 1) % local", bytes: "(local - 1) / local * B"}
    - {from: all, to: "(i + local) % n", bytes: "2 * (n / local - 1) / (n / local) * B / local"}
    - {from: all, to: "i - i % local + (i % local + 1) % local", bytes: "(local - 1) / local * B"}
kv_transfer:
  params:
    prefill: {kind: number, default: "n // 2"}
  where: ["prefill >= 1", "prefill < n"]
  phases:
    - {from: "range(0, prefill)", to: "range(prefill, n)", bytes: "B / (n - prefill)"}
"""

BUILTINS = Registry({name: parse_template(name, doc) for name, doc in yaml.safe_load(BUILTIN_TEXT).items()})
