"""Stallmann & Wilbik (2022), a framework for federated cluster analysis: FedFCM, FedFuzzDB, choosing K."""
