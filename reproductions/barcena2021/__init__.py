"""Corcuera Bárcena et al. (2021), federated fuzzy c-means: Table 1 and Figure 1."""
