"""Scoring an encoder on held-out data: the evaluators (``evaluators``: STS, pair
classification, NLI accuracy, triplets) and binary pair metrics (``pair_metrics``).
"""
