"""Chapter 1: from ``y = x @ w`` to tensor cores."""
