"""The DANE paper's synthetic ridge problem, a tabular source for the convex experiments.

(scikit-learn's digits as flat feature rows, `digits-tabular`, is in builtin.py next to the
image version it flattens.)
"""

from __future__ import annotations

import numpy as np

from .raw import RawDataset, SourceOptions

RIDGE_DIM = 500  # d of the DANE paper's synthetic experiment (Shamir et al. 2014, section 7)
RIDGE_DECAY = 1.2  # covariance diag(i^-1.2), i = 1..d
RIDGE_L2 = 0.005  # the paper's lambda, stored in the store attributes as "l2"
RIDGE_SAMPLES = 6000


def make_ridge_source(options: SourceOptions) -> RawDataset:
    """x ~ N(0, diag(i^-1.2)) in R^500, y = <x, 1> + N(0, 1), float64, with l2 = 0.005.

    `samples` (default 6000) is the number of training rows, the paper's N; the test split is
    drawn separately from the same distribution (test_fraction * N rows), so that N is exact.
    """
    num_train = options.samples or RIDGE_SAMPLES
    num_test = max(1, round(num_train * options.test_fraction))
    rng = np.random.default_rng(options.seed)
    scale = np.arange(1, RIDGE_DIM + 1, dtype=np.float64) ** (-RIDGE_DECAY / 2)
    x = rng.standard_normal((num_train + num_test, RIDGE_DIM)) * scale
    y = x.sum(axis=1) + rng.standard_normal(num_train + num_test)
    return RawDataset(
        source="synthetic-ridge",
        task="regression",
        num_classes=1,
        x_train=x[:num_train],
        y_train=y[:num_train],
        x_test=x[num_train:],
        y_test=y[num_train:],
        attrs={"l2": RIDGE_L2},
    )
