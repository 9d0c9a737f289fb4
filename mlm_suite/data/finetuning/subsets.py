"""Class-balanced, nested training subsets for label-efficiency curves.

:func:`balanced_nested_subsets` draws, for one seed, a subset of each requested size from a pool of training
examples such that

* each subset is **class-balanced**: every class gets ``size // k`` examples (``k`` classes) and the remaining
  ``size % k`` go one each to the first classes of a per-seed shuffled class order;
* the subsets are **nested**: for one seed the 32-example subset lies inside the 64-example one, and so on, because
  each class's examples are taken from the front of one per-seed permutation of that class and the per-class
  quotas never shrink as the size grows;
* they are drawn **only from the pool** (``pool``: the training split's indices), so they are disjoint from the
  validation and test splits by construction;
* they are **deterministic** per seed (``random.Random(seed)``) and differ across seeds.

    >>> subsets = balanced_nested_subsets(["neg", "pos"] * 50, [4, 10], seed=0)
    >>> set(subsets[4]) <= set(subsets[10])
    True
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterable, Sequence


def class_quotas(size: int, classes: Sequence[Hashable]) -> dict[Hashable, int]:
    """Examples per class for a subset of ``size``: ``size // k`` each, plus one for the first ``size % k`` of
    ``classes`` (in the order given). Never shrinks for any class as ``size`` grows, which makes subsets nested."""
    base, remainder = divmod(size, len(classes))
    return {label: base + (1 if rank < remainder else 0) for rank, label in enumerate(classes)}


def balanced_nested_subsets(
    labels: Sequence[Hashable], sizes: Iterable[int], seed: int, pool: Iterable[int] | None = None
) -> dict[int, list[int]]:
    """Class-balanced subsets of ``sizes`` examples, nested across sizes, as ``{size: sorted indices}``.

    Args:
        labels: the label of every example; the returned indices are positions in this sequence.
        sizes: subset sizes (positive integers; repeats are allowed and give the same subset).
        seed: draws the per-class permutations and the order in which classes receive the remainder.
        pool: the indices that may be drawn (the training split's); default: every index of ``labels``.

    Raises:
        ValueError: a size that is not a positive integer, a size larger than the pool, or a class with fewer
            pool examples than its share of a size (naming the class, its share and what the pool holds).
    """
    sizes = list(sizes)
    for size in sizes:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"subset sizes must be positive integers, got {size!r}")
    indices = sorted(set(range(len(labels)) if pool is None else pool))
    for index in indices:
        if not 0 <= index < len(labels):
            raise ValueError(f"pool index {index} is outside the {len(labels)} labels")
    by_class: dict[Hashable, list[int]] = {}
    for index in indices:
        by_class.setdefault(labels[index], []).append(index)
    if not by_class:
        raise ValueError("the pool is empty: there is nothing to draw subsets from")
    rng = random.Random(seed)
    classes = sorted(by_class, key=repr)  # a fixed order whatever the label type, before the seeded shuffle
    for label in classes:
        rng.shuffle(by_class[label])
    rng.shuffle(classes)  # which classes get the remainder of an odd size
    subsets = {}
    for size in sorted(set(sizes)):
        if size > len(indices):
            raise ValueError(f"subset size {size} is larger than the pool of {len(indices)} examples")
        chosen = []
        for label, quota in class_quotas(size, classes).items():
            if quota > len(by_class[label]):
                raise ValueError(
                    f"a class-balanced subset of {size} needs {quota} examples of class {label!r}, "
                    f"but the pool has only {len(by_class[label])}"
                )
            chosen += by_class[label][:quota]
        subsets[size] = sorted(chosen)
    return subsets
